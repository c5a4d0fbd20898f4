//! Where each queue's capture thread and worker run (`--cpus`).
//!
//! - `auto`: a queue's capture thread goes where the NIC's interrupt for that RX
//!   queue is served (read from `/proc/interrupts` and `/proc/irq/N/
//!   smp_affinity_list`), so the packet is still in that core's cache; its
//!   worker goes to the next allowed CPU. Without interrupt information (a veth,
//!   a trace file) queues are spread: capture and worker of queue q on the
//!   (2q)th and (2q+1)th allowed CPUs, wrapping.
//! - a list `0,2,4-5`: taken in order, two per queue (capture, worker), wrapping.
//! - none (the default): the scheduler decides.

use crate::{Setting, SettingError};
use std::fmt;

/// How the user asked for threads to be placed; parsed from `auto` or a list
/// such as `0,2,4-7`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CpuPlan {
    /// The scheduler decides.
    #[default]
    Unpinned,
    /// A queue's capture thread goes where the NIC's interrupt for that RX
    /// queue is served (from `/proc/interrupts` and `smp_affinity_list`), so
    /// the packet is still in that core's cache; its worker to the next CPU
    /// this process may use. Without interrupt information (a veth, a trace)
    /// queue q's capture and worker go to the (2q)th and (2q+1)th allowed
    /// CPUs, wrapping.
    Auto,
    /// These CPUs in order, two per queue (capture, worker), wrapping. Each
    /// must be one this process may use, or the build fails.
    List(Vec<usize>),
}

impl std::str::FromStr for CpuPlan {
    type Err = SettingError;

    fn from_str(s: &str) -> Result<Self, SettingError> {
        if s == "auto" {
            return Ok(CpuPlan::Auto);
        }
        let mut cpus = Vec::new();
        for part in s.split(',') {
            let bad = || SettingError::new(Setting::Cpus, format!("{s:?}: expected `auto` or a list like 0,2,4-7"));
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b): (usize, usize) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
                    if a > b || b - a > 4096 {
                        return Err(bad());
                    }
                    cpus.extend(a..=b);
                }
                None => cpus.push(part.trim().parse().map_err(|_| bad())?),
            }
        }
        Ok(CpuPlan::List(cpus))
    }
}

/// Where one queue's threads run; its `Display` says it all in one line
/// (`q0: capture cpu2 worker cpu3 (irq 45)`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    pub(crate) queue: crate::QueueId,
    /// The CPU of the queue's capture thread; `None` when unpinned. (A trace
    /// has one capture thread for all its queues: it runs on the first queue's.)
    pub capture_cpu: Option<usize>,
    pub(crate) worker_cpu: Option<usize>,
    /// Why: "irq 45", "spread", "list".
    pub(crate) reason: String,
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpu = |c: Option<usize>| c.map_or("any".to_string(), |c| format!("cpu{c}"));
        write!(f, "q{}: capture {} worker {} ({})", self.queue, cpu(self.capture_cpu), cpu(self.worker_cpu), self.reason)
    }
}

/// The IRQ serving RX queue `queue` of `iface`, by the names drivers give in
/// /proc/interrupts (`eth1-rx-2`, `eth1-TxRx-2`, `eth1-2`).
fn queue_irq(interrupts: &str, iface: &str, queue: u16) -> Option<u32> {
    let wanted = [format!("{iface}-rx-{queue}"), format!("{iface}-TxRx-{queue}"), format!("{iface}-{queue}")];
    interrupts.lines().find_map(|line| {
        let name = line.split_whitespace().last()?;
        if wanted.iter().any(|w| name == w) {
            line.split(':').next()?.trim().parse().ok()
        } else {
            None
        }
    })
}

fn first_cpu_of(list: &str) -> Option<usize> {
    list.trim().split([',', '-']).next()?.parse().ok()
}

/// Decide placements for `queues` of `iface` (None for trace files) among `allowed` CPUs.
pub(crate) fn plan(plan: &CpuPlan, iface: Option<&str>, queues: &[crate::QueueId], allowed: &[usize]) -> Vec<Placement> {
    let n = allowed.len().max(1);
    let at = |i: usize| allowed.get(i % n).copied();
    let interrupts = match (plan, iface) {
        (CpuPlan::Auto, Some(_)) => std::fs::read_to_string("/proc/interrupts").unwrap_or_default(),
        _ => String::new(),
    };
    queues
        .iter()
        .enumerate()
        .map(|(i, &queue)| match plan {
            CpuPlan::Unpinned => Placement { queue, capture_cpu: None, worker_cpu: None, reason: "unpinned".into() },
            CpuPlan::List(list) => {
                let pick = |k: usize| list.get(k % list.len().max(1)).copied();
                Placement { queue, capture_cpu: pick(2 * i), worker_cpu: pick(2 * i + 1), reason: "list".into() }
            }
            CpuPlan::Auto => {
                let irq_cpu = iface
                    .and_then(|ifc| queue_irq(&interrupts, ifc, queue.0))
                    .and_then(|irq| {
                        let l = std::fs::read_to_string(format!("/proc/irq/{irq}/smp_affinity_list")).ok()?;
                        Some((irq, first_cpu_of(&l)?))
                    })
                    .filter(|(_, cpu)| allowed.contains(cpu));
                match irq_cpu {
                    Some((irq, cpu)) => {
                        let pos = allowed.iter().position(|&c| c == cpu).unwrap_or(0);
                        Placement { queue, capture_cpu: Some(cpu), worker_cpu: at(pos + 1), reason: format!("irq {irq}") }
                    }
                    None => Placement { queue, capture_cpu: at(2 * i), worker_cpu: at(2 * i + 1), reason: "spread".into() },
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::QueueId;

    #[test]
    fn parses_plans() {
        assert_eq!("auto".parse::<CpuPlan>(), Ok(CpuPlan::Auto));
        assert_eq!("0,2,4-6".parse::<CpuPlan>(), Ok(CpuPlan::List(vec![0, 2, 4, 5, 6])));
        assert!("x".parse::<CpuPlan>().is_err());
        assert!("3-1".parse::<CpuPlan>().is_err());
    }

    #[test]
    fn spreads_and_lists() {
        let q = [QueueId(0), QueueId(1)];
        let p = plan(&CpuPlan::Auto, None, &q, &[0, 1]);
        assert_eq!((p[0].capture_cpu, p[0].worker_cpu, p[1].capture_cpu, p[1].worker_cpu), (Some(0), Some(1), Some(0), Some(1)));
        assert_eq!(p[0].reason, "spread");
        let p = plan(&CpuPlan::List(vec![3, 2, 1]), None, &q, &[0, 1, 2, 3]);
        assert_eq!((p[0].capture_cpu, p[0].worker_cpu, p[1].capture_cpu, p[1].worker_cpu), (Some(3), Some(2), Some(1), Some(3)));
        assert!(plan(&CpuPlan::Unpinned, None, &q, &[0]).iter().all(|p| p.capture_cpu.is_none()));
    }

    #[test]
    fn finds_queue_irqs_by_driver_names() {
        let interrupts = "           CPU0       CPU1\n 45:   1  2  PCI-MSI 1-edge  eth1-TxRx-0\n 46:  3 4 PCI-MSI 2-edge eth1-TxRx-1\n 47: 0 0 PCI-MSI x eth10-rx-1\n";
        assert_eq!(queue_irq(interrupts, "eth1", 1), Some(46));
        assert_eq!(queue_irq(interrupts, "eth10", 1), Some(47));
        assert_eq!(queue_irq(interrupts, "eth1", 2), None);
        assert_eq!(first_cpu_of("2-3\n"), Some(2));
    }
}
