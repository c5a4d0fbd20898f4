//! weir's errors as Python exceptions: one base, `weir.Error`, and a
//! subclass per kind of failure a caller may act on, each carrying weir's
//! own message (which names the file and byte offset of a malformed trace,
//! the capability a refused privilege needs, the keyword a refused setting
//! came from).
//!
//! ```text
//! weir.Error
//! ├── weir.BadInputError           what the caller gave is wrong (a source name, a setting,
//! │   │                            more memory than may be used)
//! │   ├── weir.MalformedTraceError a trace that is not pcap or pcapng, or is damaged
//! │   ├── weir.FilterError         a filter expression libpcap does not compile
//! │   └── weir.NoSuchDeviceError   no such network interface
//! ├── weir.MissingCapabilityError  the system refused a privilege (CAP_NET_RAW, CAP_BPF, ...)
//! ├── weir.BusyError               something else holds what the source needs
//! └── weir.StalePacketError        a packet's data read after the next packet was taken
//! ```
//!
//! Notes about how a source was opened (what the CLI prints on stderr as
//! `weir: ...`) are `weir.Notice` warnings.
//!
//! The CLI's exit code 2 is exactly `BadInputError` and its subclasses.

use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyUserWarning};
use pyo3::prelude::*;
use weir::engine::{BuildError, RunError};
use weir::filter::FilterError as Uncompiled;
use weir::{Setting, SettingError, SourceError, SourceErrorKind};

create_exception!(weir, Error, PyException, "Base of every error weir raises; its message is weir's.");
create_exception!(weir, BadInputError, Error, "What the caller gave is wrong: a source name, an option, a malformed trace, a filter.");
create_exception!(
    weir,
    MalformedTraceError,
    BadInputError,
    "A trace that is not pcap or pcapng, or is damaged: the message names the file and byte offset."
);
create_exception!(weir, FilterError, BadInputError, "A filter expression (libpcap's language) that does not compile.");
create_exception!(weir, NoSuchDeviceError, BadInputError, "No such network interface (in the network namespace asked for).");
create_exception!(
    weir,
    MissingCapabilityError,
    Error,
    "The system refused a privilege the source needs; the message names the capability."
);
create_exception!(weir, BusyError, Error, "Something else holds what the source needs (an XDP program, a queue).");
create_exception!(
    weir,
    StalePacketError,
    Error,
    "A packet's data was read after the next packet was taken: it is valid until then (p.bytes() keeps a copy)."
);

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("BadInputError", py.get_type::<BadInputError>())?;
    m.add("MalformedTraceError", py.get_type::<MalformedTraceError>())?;
    m.add("FilterError", py.get_type::<FilterError>())?;
    m.add("NoSuchDeviceError", py.get_type::<NoSuchDeviceError>())?;
    m.add("MissingCapabilityError", py.get_type::<MissingCapabilityError>())?;
    m.add("BusyError", py.get_type::<BusyError>())?;
    m.add("StalePacketError", py.get_type::<StalePacketError>())?;
    m.add("Notice", py.get_type::<Notice>())?;
    Ok(())
}

/// A refused option, named by its keyword.
pub fn bad_option(keyword: &str, problem: impl std::fmt::Display) -> PyErr {
    BadInputError::new_err(format!("{keyword}: {problem}"))
}

/// How the Python package names a setting the library's errors are about: by
/// its keyword argument.
fn keyword(s: Setting) -> &'static str {
    match s {
        Setting::Pool => "pool",
        Setting::Cpus => "cpus",
        Setting::Pacing => "pps/mbps/speed",
        Setting::Fanout => "fanout",
        Setting::XdpSpread => "xdp_spread",
        Setting::Locality => "locality",
        Setting::Balance => "balance",
        Setting::FlowTable => "max_flows",
        Setting::Queues => "queues",
        Setting::TraceReading => "trace_access",
        // No keyword of its own: the library's words.
        other => other.name(),
    }
}

/// A refused setting, said with its keyword.
pub fn setting_error(e: &SettingError) -> PyErr {
    bad_option(keyword(e.setting), &e.problem)
}

/// A source error, classed by its kind.
pub fn source_error(message: String, e: &SourceError) -> PyErr {
    if let SourceError::Setting(s) = e {
        return setting_error(s);
    }
    if matches!(e, SourceError::Malformed { .. }) {
        return MalformedTraceError::new_err(message);
    }
    match e.kind() {
        SourceErrorKind::Permission => MissingCapabilityError::new_err(message),
        SourceErrorKind::NoSuchDevice => NoSuchDeviceError::new_err(message),
        SourceErrorKind::Busy => BusyError::new_err(message),
        SourceErrorKind::BadInput | SourceErrorKind::Memory => BadInputError::new_err(message),
        _ => Error::new_err(message),
    }
}

/// An engine that could not be built.
pub fn build_error(e: BuildError) -> PyErr {
    if let Some(s) = e.setting_error() {
        return setting_error(s);
    }
    match &e {
        BuildError::Source(s) => source_error(e.to_string(), s),
        BuildError::Filter(Uncompiled::Library(_)) => Error::new_err(e.to_string()),
        BuildError::Filter(_) => FilterError::new_err(e.to_string()),
        _ if e.is_bad_input() => BadInputError::new_err(e.to_string()),
        _ => Error::new_err(e.to_string()),
    }
}

/// A run that failed, or could not start.
pub fn run_error(e: &RunError) -> PyErr {
    match e {
        RunError::Source { error, .. } => source_error(e.to_string(), error),
        RunError::Setting(s) => setting_error(s),
        _ => Error::new_err(e.to_string()),
    }
}

create_exception!(
    weir,
    Notice,
    PyUserWarning,
    "What weir says about how a source was opened (a filter on the interpreter, afxdp in copy mode, ...), as a warning."
);

/// Says the engine's notes for the user, as `weir.Notice` warnings (the CLI
/// prints them on stderr).
pub fn notes(py: Python<'_>, notes: &[String]) -> PyResult<()> {
    for n in notes {
        let text = std::ffi::CString::new(n.replace('\0', " ")).unwrap_or_default();
        PyErr::warn(py, &py.get_type::<Notice>(), &text, 1)?;
    }
    Ok(())
}
