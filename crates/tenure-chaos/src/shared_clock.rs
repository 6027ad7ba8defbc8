//! The host's shared clock for the history: `CLOCK_BOOTTIME` read by a raw
//! system call.
//!
//! Candidates may run under libfaketime (clock faults), which replaces the libc
//! `clock_gettime` the elector uses. The history must be on one clock that no
//! fault touches, so it is read with `syscall(SYS_clock_gettime)`, which the
//! preload cannot intercept.

/// Nanoseconds of `CLOCK_BOOTTIME`, untouched by libfaketime.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid clock id and a writable timespec.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clock_gettime,
            libc::CLOCK_BOOTTIME,
            &mut ts as *mut libc::timespec,
        )
    };
    if rc != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}
