//! The process's own metrics, the `process_*` set every Prometheus client
//! serves (CPU in seconds with the kernel's tick resolution, not whole
//! seconds), and the CPU time of each named thread, read from /proc/self.
//! A file that cannot be read (a program that gave up its privileges may no
//! longer list its descriptors) leaves its metric out.

use crate::catalogue as c;
use crate::Families;
use std::collections::BTreeMap;

/// Add the process's metrics to `out`.
pub(crate) fn collect(out: &mut Families) {
    let Ok(me) = procfs::process::Process::myself() else { return };
    let tick = procfs::ticks_per_second().max(1) as f64;
    if let Ok(stat) = me.stat() {
        out.counter(&c::PROCESS_CPU, &[], (stat.utime + stat.stime) as f64 / tick);
        out.gauge(&c::PROCESS_RESIDENT, &[], (stat.rss.saturating_mul(procfs::page_size())) as f64);
        out.gauge(&c::PROCESS_VIRTUAL, &[], stat.vsize as f64);
        out.gauge(&c::PROCESS_THREADS, &[], stat.num_threads as f64);
        if let Ok(boot) = procfs::boot_time_secs() {
            out.gauge(&c::PROCESS_START, &[], boot as f64 + stat.starttime as f64 / tick);
        }
    }
    if let Ok(n) = me.fd_count() {
        out.gauge(&c::PROCESS_OPEN_FDS, &[], n as f64);
    }
    if let Ok(limits) = me.limits() {
        if let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit {
            out.gauge(&c::PROCESS_MAX_FDS, &[], max as f64);
        }
    }
    // Threads of one name (a thread pool) are added together: the name is
    // what a dashboard groups by, and thread ids come and go.
    let mut by_name: BTreeMap<String, u64> = BTreeMap::new();
    if let Ok(tasks) = me.tasks() {
        for stat in tasks.flatten().filter_map(|t| t.stat().ok()) {
            *by_name.entry(stat.comm).or_default() += stat.utime + stat.stime;
        }
    }
    for (name, ticks) in &by_name {
        out.counter(&c::THREAD_CPU, &[("thread", name)], *ticks as f64 / tick);
    }
}
