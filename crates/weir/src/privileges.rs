//! Privileges: running as an unprivileged user once the sockets are open, and
//! telling the user which capability an operation lacks when the kernel says no.
//!
//! - [`drop_to`] becomes another user for good: it looks the user up
//!   (getpwnam_r), sets the user's supplementary groups (initgroups), then the
//!   group (setgid), then the user (setuid), in that order because each step
//!   needs the privilege the next one gives up. It clears capabilities the
//!   calling thread still holds (a process given them by file capabilities
//!   keeps them across setuid), then checks every thread of the process: all
//!   four uids and gids are the user's, no capability is left, and setuid(0)
//!   fails. glibc's setuid, setgid and setgroups change every thread of the
//!   process, so threads started before the drop are covered; anything short of
//!   a full drop is an error, never a warning.
//! - [`current`] reads the identity back, to report what the process runs as.
//! - Inside the crate, `missing_capability` turns a refused operation into
//!   advice, reading which capabilities the process holds from `CapEff` in
//!   /proc/self/status: "opening a packet socket needs CAP_NET_RAW, which this
//!   process lacks (run as root, or: setcap cap_net_raw,cap_net_admin=eip
//!   /usr/bin/weir)". [`tx`](crate::tx) errors carry it.
//!
//! Sockets, rings and mappings opened before the drop keep working after it;
//! files opened after it are opened as the new user.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;

/// A Linux capability (linux/capability.h numbering).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Capability {
    SetGid = 6,
    SetUid = 7,
    NetAdmin = 12,
    NetRaw = 13,
    SysAdmin = 21,
}

impl Capability {
    fn bit(self) -> u64 {
        1 << self as u32
    }

    /// The name as the kernel documents it, e.g. `CAP_NET_RAW`.
    fn name(self) -> &'static str {
        match self {
            Capability::SetGid => "CAP_SETGID",
            Capability::SetUid => "CAP_SETUID",
            Capability::NetAdmin => "CAP_NET_ADMIN",
            Capability::NetRaw => "CAP_NET_RAW",
            Capability::SysAdmin => "CAP_SYS_ADMIN",
        }
    }

    /// The name as setcap(8) takes it, e.g. `cap_net_raw`.
    fn setcap_name(self) -> String {
        self.name().to_ascii_lowercase()
    }
}

/// Something weir does that the kernel allows only with capabilities.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Operation {
    /// An AF_PACKET socket, for capture or for sending.
    PacketSocket,
    /// Entering another network namespace (setns).
    EnterNetns,
    /// Becoming another user (`-Z`).
    ChangeUser,
}

impl Operation {
    /// The capabilities the operation needs, all of them.
    fn needs(self) -> &'static [Capability] {
        match self {
            Operation::PacketSocket => &[Capability::NetRaw],
            Operation::EnterNetns => &[Capability::SysAdmin],
            Operation::ChangeUser => &[Capability::SetUid, Capability::SetGid],
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Operation::PacketSocket => "opening a packet socket",
            Operation::EnterNetns => "entering a network namespace",
            Operation::ChangeUser => "changing to another user",
        }
    }
}

/// What every live capture needs; suggested alongside an operation's own needs,
/// so one setcap covers the common uses.
const BASELINE: [Capability; 2] = [Capability::NetRaw, Capability::NetAdmin];

/// True for the errors the kernel gives when a capability is missing.
pub(crate) fn is_permission_error(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EPERM | libc::EACCES)) || e.kind() == io::ErrorKind::PermissionDenied
}

/// A capability mask from the text of /proc/PID/status (`field` is e.g. "CapEff").
fn status_mask(status: &str, field: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// The capabilities the calling process holds in effect, if /proc says.
fn effective_capabilities() -> Option<u64> {
    status_mask(&std::fs::read_to_string("/proc/self/status").ok()?, "CapEff")
}

/// Advice for `op` refused by the kernel: which capability is missing and how
/// to grant it, or, when every needed one is held, that something else forbids it.
pub(crate) fn missing_capability(op: Operation) -> String {
    missing_capability_with(op, effective_capabilities())
}

fn missing_capability_with(op: Operation, effective: Option<u64>) -> String {
    let needs = op.needs();
    let names = |caps: &[Capability]| caps.iter().map(|c| c.name()).collect::<Vec<_>>().join(" and ");
    let mut grant: Vec<Capability> = BASELINE.to_vec();
    grant.extend(needs.iter().filter(|c| !BASELINE.contains(c)));
    let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "$(which weir)".into());
    let advice = format!("run as root, or: setcap {}=eip {exe}", grant.iter().map(|c| c.setcap_name()).collect::<Vec<_>>().join(","));
    match effective {
        None => format!("{} needs {} ({advice})", op.describe(), names(needs)),
        Some(eff) => {
            let missing: Vec<Capability> = needs.iter().copied().filter(|c| eff & c.bit() == 0).collect();
            if missing.is_empty() {
                format!(
                    "{} was refused although this process holds {}: a security module (SELinux, AppArmor), \
a seccomp filter or a user namespace forbids it",
                    op.describe(),
                    names(needs)
                )
            } else {
                format!("{} needs {}, which this process lacks ({advice})", op.describe(), names(&missing))
            }
        }
    }
}

/// A process's user and groups, as the kernel holds them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Real, effective and saved user ids.
    pub uid: [u32; 3],
    /// Real, effective and saved group ids.
    pub gid: [u32; 3],
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// The calling process's identity.
pub fn current() -> Identity {
    let (mut r, mut e, mut s) = (0, 0, 0);
    // SAFETY: getresuid writes three uid_t through valid pointers and cannot fail.
    unsafe { libc::getresuid(&mut r, &mut e, &mut s) };
    let uid = [r, e, s];
    // SAFETY: as above, for group ids.
    unsafe { libc::getresgid(&mut r, &mut e, &mut s) };
    Identity { uid, gid: [r, e, s], groups: groups() }
}

fn groups() -> Vec<u32> {
    // SAFETY: a zero-length call only returns the count.
    let n = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let mut v = vec![0; usize::try_from(n).unwrap_or(0)];
    // SAFETY: `v` has room for the `n` groups the call may write.
    let got = unsafe { libc::getgroups(n.max(0), v.as_mut_ptr()) };
    v.truncate(usize::try_from(got).unwrap_or(0));
    v
}

/// Why privileges could not be dropped. After `NotPermitted`, `Failed` or
/// `NotDropped` the process may be half-way; the caller should exit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivError {
    /// No user of that name in the password database (a name containing a NUL
    /// byte never matches). Nothing was changed.
    #[error("dropping privileges: no user {user:?}")]
    NoSuchUser {
        /// The user name asked for.
        user: String,
    },
    /// The password database could not be read. Nothing was changed.
    #[error("dropping privileges: looking up user {user:?}: {error}")]
    Lookup {
        /// The user name asked for.
        user: String,
        /// What getpwnam_r returned.
        error: io::Error,
    },
    /// The kernel refused a step for want of a capability.
    #[error("dropping privileges to {user}: {step}: {hint}")]
    NotPermitted {
        /// The user name asked for.
        user: String,
        /// The refused call: `initgroups`, `setgid` or `setuid`.
        step: &'static str,
        /// Which capability is missing and how to grant it.
        hint: String,
    },
    /// A step failed for another reason.
    #[error("dropping privileges to {user}: {step}: {error}")]
    Failed {
        /// The user name asked for.
        user: String,
        /// The failed step: `initgroups`, `setgid`, `setuid` or `clearing capabilities`.
        step: &'static str,
        /// The OS error.
        error: io::Error,
    },
    /// Every step succeeded, but the check afterwards found a thread with
    /// another id or group list, a capability left, or setuid(0) succeeding.
    #[error("dropping privileges to {user}: not fully dropped: {detail}")]
    NotDropped {
        /// The user name asked for.
        user: String,
        /// What was left, naming the thread's /proc status file where it applies.
        detail: String,
    },
}

impl PrivError {
    /// True when the error is in what the user asked for (no such user), not
    /// in the system; the CLI exits with 2 for these.
    pub fn is_bad_input(&self) -> bool {
        matches!(self, PrivError::NoSuchUser { .. })
    }
}

/// A user's name and ids, from the password database.
struct PasswdEntry {
    name: CString,
    uid: u32,
    gid: u32,
}

fn lookup(user: &str) -> Result<PasswdEntry, PrivError> {
    let name = CString::new(user).map_err(|_| PrivError::NoSuchUser { user: user.into() })?;
    // SAFETY: sysconf has no memory effects.
    let hint = unsafe { libc::sysconf(libc::_SC_GETPW_R_SIZE_MAX) };
    let mut buf = vec![0 as libc::c_char; usize::try_from(hint).ok().filter(|&n| n > 0).unwrap_or(1024)];
    loop {
        // SAFETY: passwd is plain old data; zeroed is a valid value.
        let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call; the strings getpwnam_r
        // returns point into `buf`, which we read (below) before it changes.
        let rc = unsafe { libc::getpwnam_r(name.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut result) };
        match rc {
            0 if result.is_null() => return Err(PrivError::NoSuchUser { user: user.into() }),
            0 => {
                // SAFETY: on success pw_name is a NUL-terminated string inside `buf`.
                let name = unsafe { CStr::from_ptr(pw.pw_name) }.to_owned();
                return Ok(PasswdEntry { name, uid: pw.pw_uid, gid: pw.pw_gid });
            }
            libc::ERANGE if buf.len() < 1 << 20 => buf.resize(buf.len() * 2, 0),
            // Some NSS modules say "not found" with an errno instead of a null result.
            libc::ENOENT | libc::ESRCH | libc::EBADF => return Err(PrivError::NoSuchUser { user: user.into() }),
            e => return Err(PrivError::Lookup { user: user.into(), error: io::Error::from_raw_os_error(e) }),
        }
    }
}

/// `struct __user_cap_header_struct` (linux/capability.h).
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` (linux/capability.h); version 3 takes two.
#[repr(C)]
#[derive(Copy, Clone, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const _: () = assert!(std::mem::size_of::<CapHeader>() == 8);
const _: () = assert!(std::mem::size_of::<CapData>() == 12);

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Clear every capability of the calling thread (which also empties its ambient set).
fn clear_capabilities() -> io::Result<()> {
    let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData::default(); 2];
    // SAFETY: capset reads one header and, for version 3, two data structs.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn step(user: &str, step: &'static str, rc: libc::c_int) -> Result<(), PrivError> {
    if rc == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if is_permission_error(&error) {
        Err(PrivError::NotPermitted { user: user.into(), step, hint: missing_capability(Operation::ChangeUser) })
    } else {
        Err(PrivError::Failed { user: user.into(), step, error })
    }
}

/// Become `user` for good; see the module documentation. Returns the identity
/// the process now has. On error, see [`PrivError`] for whether it is safe to go on.
pub fn drop_to(user: &str) -> Result<Identity, PrivError> {
    let pw = lookup(user)?;
    // SAFETY: `pw.name` is a NUL-terminated user name; initgroups reads it.
    step(user, "initgroups", unsafe { libc::initgroups(pw.name.as_ptr(), pw.gid) })?;
    // SAFETY: plain system call wrappers (glibc applies them to every thread).
    step(user, "setgid", unsafe { libc::setgid(pw.gid) })?;
    // SAFETY: as above.
    step(user, "setuid", unsafe { libc::setuid(pw.uid) })?;
    if pw.uid != 0 {
        let left = std::fs::read_to_string("/proc/thread-self/status").ok().and_then(|s| status_mask(&s, "CapPrm"));
        if left != Some(0) {
            clear_capabilities().map_err(|error| PrivError::Failed { user: user.into(), step: "clearing capabilities", error })?;
        }
    }
    verify(user, pw.uid, pw.gid)?;
    Ok(current())
}

/// Every thread runs as `uid`/`gid` with the same groups and, unless the user
/// is root, no capability, and setuid(0) fails.
fn verify(user: &str, uid: u32, gid: u32) -> Result<(), PrivError> {
    let not_dropped = |detail: String| PrivError::NotDropped { user: user.into(), detail };
    let tasks = std::fs::read_dir("/proc/self/task").map_err(|e| not_dropped(format!("cannot list threads: {e}")))?;
    let mut groups: Option<String> = None;
    for task in tasks {
        let path = task.map_err(|e| not_dropped(format!("cannot list threads: {e}")))?.path().join("status");
        // A thread that ended since the listing has nothing left to check.
        let Ok(status) = std::fs::read_to_string(&path) else { continue };
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')).map(str::trim).unwrap_or("");
        let ids = |name: &str| field(name).split_whitespace().map(|v| v.parse::<u32>().ok()).collect::<Vec<_>>();
        if ids("Uid") != [Some(uid); 4] || ids("Gid") != [Some(gid); 4] {
            return Err(not_dropped(format!("{} has Uid {:?}, Gid {:?}", path.display(), field("Uid"), field("Gid"))));
        }
        let g = field("Groups").to_string();
        if groups.get_or_insert_with(|| g.clone()) != &g {
            return Err(not_dropped(format!("threads disagree on supplementary groups ({g:?})")));
        }
        if uid != 0 {
            for cap in ["CapPrm", "CapEff"] {
                if status_mask(&status, cap) != Some(0) {
                    return Err(not_dropped(format!("{} still has {cap} {}", path.display(), field(cap))));
                }
            }
        }
    }
    if uid != 0 {
        // SAFETY: a system call wrapper; on the expected failure nothing changes.
        if unsafe { libc::setuid(0) } == 0 {
            return Err(not_dropped("setuid(0) succeeded: root can be regained".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tweir\nUid:\t0\t0\t0\t0\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\n\
CapEff:\t0000000000002000\nCapBnd:\t000001ffffffffff\n";

    #[test]
    fn reads_capability_masks() {
        assert_eq!(status_mask(STATUS, "CapEff"), Some(1 << 13));
        assert_eq!(status_mask(STATUS, "CapPrm"), Some(0x1ff_ffff_ffff));
        assert_eq!(status_mask(STATUS, "CapAmb"), None);
        assert_eq!(status_mask("CapEff:\tzz\n", "CapEff"), None);
    }

    #[test]
    fn says_which_capability_is_missing() {
        let m = missing_capability_with(Operation::PacketSocket, Some(0));
        assert!(m.starts_with("opening a packet socket needs CAP_NET_RAW, which this process lacks (run as root, or: setcap cap_net_raw,cap_net_admin=eip "), "{m}");
        let m = missing_capability_with(Operation::ChangeUser, Some(Capability::SetGid.bit()));
        assert!(m.starts_with("changing to another user needs CAP_SETUID, which"), "{m}");
        assert!(m.contains("setcap cap_net_raw,cap_net_admin,cap_setuid,cap_setgid=eip"), "{m}");
        let m = missing_capability_with(Operation::ChangeUser, Some(0));
        assert!(m.contains("needs CAP_SETUID and CAP_SETGID, which this process lacks "), "{m}");
        let m = missing_capability_with(Operation::PacketSocket, Some(Capability::NetRaw.bit()));
        assert!(m.contains("refused although this process holds CAP_NET_RAW"), "{m}");
        let m = missing_capability_with(Operation::EnterNetns, None);
        assert!(m.starts_with("entering a network namespace needs CAP_SYS_ADMIN (run as root"), "{m}");
    }

    #[test]
    fn permission_errors() {
        assert!(is_permission_error(&io::Error::from_raw_os_error(libc::EPERM)));
        assert!(is_permission_error(&io::Error::from_raw_os_error(libc::EACCES)));
        assert!(!is_permission_error(&io::Error::from_raw_os_error(libc::ENODEV)));
    }

    #[test]
    fn looks_users_up() {
        let root = lookup("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        assert!(matches!(lookup("no-such-user-weir"), Err(PrivError::NoSuchUser { .. })));
        assert!(matches!(lookup("nul\0inside"), Err(PrivError::NoSuchUser { .. })));
        assert!(PrivError::NoSuchUser { user: "x".into() }.is_bad_input());
    }

    #[test]
    fn current_identity_matches_proc() {
        let me = current();
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let uid_line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
        assert!(uid_line.split_whitespace().nth(2) == Some(&me.uid[1].to_string()), "{uid_line} vs {me:?}");
    }
}
