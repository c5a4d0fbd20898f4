// A file of its own so that weir-pcap's build script, which copies the system
// library's data symbols, searches the same places as weir does at run time
// (both `include!` it).

/// Where distributions put the real libpcap.
const CANDIDATES: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/libpcap.so.0.8",
    "/usr/lib/aarch64-linux-gnu/libpcap.so.0.8",
    "/lib/x86_64-linux-gnu/libpcap.so.0.8",
    "/usr/lib64/libpcap.so.1",
    "/usr/lib/libpcap.so.1",
    "/usr/lib/libpcap.so.0.8",
];
