// Programs linked against libpcap ask the loader for libpcap.so.0.8 (Debian's
// soname); ours must carry that name to be found in front of the system's.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpcap.so.0.8");
}
