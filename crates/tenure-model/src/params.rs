//! The model's parameters: time scale, clocks, bounds, and which rules and
//! assumptions hold.

/// Number of candidates in the model.
pub const CANDIDATES: usize = 3;

/// The safety rules of docs/design.md that the model can switch off one at a
/// time (each switched off is a mutation the checker must catch).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rules {
    /// Rule 2: expiry is judged by the store's clock inside the write. Off:
    /// the client sends its own clock reading and the store compares with it.
    pub store_clock_expiry: bool,
    /// Rule 3: the deadline counts from `t0`, read before the write is sent.
    /// Off: it counts from the moment the reply arrives.
    pub deadline_from_t0: bool,
    /// Rule 4: renew matches `holder = me AND term = my_term AND not expired`.
    /// Off: renew extends the lease whoever holds it, expired or not.
    pub checked_renew: bool,
    /// The term: every acquisition writes `term + 1`. Off: an acquisition
    /// keeps the stored term (only the very first one writes 1).
    pub term_increment: bool,
    /// Rule 3: belief ends at the local deadline (`is_leader()` checks it, the
    /// loss signal fires by timer). Off: a leader believes until a renewal
    /// fails.
    pub loss_at_deadline: bool,
}

impl Rules {
    /// Every rule in force: the protocol as built.
    pub const ALL: Rules = Rules {
        store_clock_expiry: true,
        deadline_from_t0: true,
        checked_renew: true,
        term_increment: true,
        loss_at_deadline: true,
    };
}

/// Parameters of one model. Time is discrete: the model advances real time in
/// ticks; every clock reads a whole number of *units* at each tick.
#[derive(Clone, Debug)]
pub struct Params {
    /// Which rules hold.
    pub rules: Rules,
    /// Units the store's clock advances per tick (the reference rate).
    pub store_rate: u16,
    /// Units each candidate's clock advances per tick.
    pub rates: [u16; CANDIDATES],
    /// Each candidate's clock reading at real time 0 (clocks of different
    /// hosts have unrelated origins).
    pub offsets: [u16; CANDIDATES],
    /// The lease length, in units.
    pub ttl: u16,
    /// The drift bound as a fraction `drift_num / drift_den` of the TTL.
    pub drift_num: u16,
    /// See `drift_num`.
    pub drift_den: u16,
    /// The margin subtracted from every local deadline, in units.
    pub margin: u16,
    /// How long a hand-over reserves the lease for its target, in units.
    pub handover_window: u16,
    /// The store clock may step forward once by this many units (0: never).
    pub store_step: u16,
    /// With rule 2 off: how far ahead of the store's clock each candidate's
    /// wall clock is (units).
    pub wall_skew: [u16; CANDIDATES],
    /// At most this many messages in flight at once.
    pub max_in_flight: usize,
}

impl Params {
    /// The protocol as built, at the model's scale: the store's clock runs at
    /// 10 units a tick; the candidates' at 9, 10 and 11 (±10 %, the model's
    /// drift bound, a larger bound than tenure's 1 % so that it shows at a
    /// coarse time scale); the lease is 40 units (4 ticks); margin 2 units.
    /// Time has no end: the model keeps durations, not instants, so its state
    /// space is finite and the check covers runs of any length.
    pub fn protocol() -> Params {
        Params {
            rules: Rules::ALL,
            store_rate: 10,
            rates: [9, 10, 11],
            offsets: [0, 7, 23],
            ttl: 40,
            drift_num: 1,
            drift_den: 10,
            margin: 2,
            handover_window: 10,
            store_step: 0,
            wall_skew: [0, 0, 25],
            max_in_flight: 2,
        }
    }

    /// The local lease a successful write grants: `ttl·(1 − drift) − margin`.
    pub fn local_lease(&self) -> u16 {
        self.ttl * (self.drift_den - self.drift_num) / self.drift_den - self.margin
    }

    /// Candidate `i`'s clock at real time `now` (ticks).
    pub fn clock(&self, i: usize, now: u32) -> u32 {
        u32::from(self.offsets[i]) + u32::from(self.rates[i]) * now
    }
}
