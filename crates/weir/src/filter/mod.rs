//! Filters: libpcap expressions, compiled by the system libpcap, run by weir.

pub mod libpcap;
