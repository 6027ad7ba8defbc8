//! The Lua scripts, each prefixed with the shared helpers of `lua/prelude.lua`.

use redis::Script;

/// Fields of a lease record as the scripts return it (then the read time).
pub(super) const RECORD_FIELDS: usize = 14;

/// The names of those fields, in the order of `FIELDS` in `lua/prelude.lua`.
pub(super) const FIELD_NAMES: [&str; RECORD_FIELDS] = [
    "holder",
    "metadata",
    "term",
    "version",
    "ttl_us",
    "acquired_us",
    "renewed_us",
    "expires_us",
    "handover_to",
    "handover_until_us",
    "handover_reason",
    "prev_holder",
    "prev_expires_us",
    "start_reason",
];

const PRELUDE: &str = include_str!("lua/prelude.lua");

fn script(body: &str) -> Script {
    Script::new(&format!("{PRELUDE}\n{body}"))
}

/// One compiled [`Script`] per operation; `Script` sends `EVALSHA` and falls
/// back to `EVAL` after a server restart flushed its script cache.
pub(super) struct Scripts {
    pub acquire: Script,
    pub renew: Script,
    pub step_down: Script,
    pub request_handover: Script,
    pub proclaim: Script,
    pub read: Script,
    pub list: Script,
    pub heartbeat: Script,
    pub heartbeat_read: Script,
    pub members: Script,
    pub reap: Script,
    pub run_put: Script,
    pub run_list: Script,
}

impl Scripts {
    pub(super) fn new() -> Self {
        Self {
            acquire: script(include_str!("lua/acquire.lua")),
            renew: script(include_str!("lua/renew.lua")),
            step_down: script(include_str!("lua/step_down.lua")),
            request_handover: script(include_str!("lua/request_handover.lua")),
            proclaim: script(include_str!("lua/proclaim.lua")),
            read: script(include_str!("lua/read.lua")),
            list: script(include_str!("lua/list.lua")),
            heartbeat: script(include_str!("lua/heartbeat.lua")),
            heartbeat_read: script(include_str!("lua/heartbeat_read.lua")),
            members: script(include_str!("lua/members.lua")),
            reap: script(include_str!("lua/reap.lua")),
            run_put: script(include_str!("lua/run_put.lua")),
            run_list: script(include_str!("lua/run_list.lua")),
        }
    }
}
