// Programs linked against libpcap ask the loader for libpcap.so.0.8 (Debian's
// soname); ours must carry that name to be found in front of the system's.
//
// libpcap also exports two data symbols, `pcap_version` and `eproto_db`. A
// program that uses one holds a copy relocation: at load time the loader
// copies the symbol's bytes out of whichever library defines it, sized as the
// library the program was linked against sized it. So ours must be real data,
// of the same size and contents as the system library's, before any code of
// ours runs. This script reads them out of the system library (the one weir
// delegates to at run time: the same search) and writes them as Rust statics.
// Reading another library's symbols is FFI: hence `unsafe`, each block with
// its reason.
#![allow(unsafe_code)]

use std::ffi::{c_char, CStr};
use std::fmt::Write;
use std::path::{Path, PathBuf};

include!("../weir/src/filter/libpcap_paths.rs");

/// `struct eproto` of `<pcap/namedb.h>`.
#[repr(C)]
struct Eproto {
    s: *const c_char,
    p: u16,
}

/// libpcap's `eproto_db` has about a dozen entries; a table without its NULL
/// end within this many is not the one we know.
const EPROTO_MAX: usize = 1024;

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libpcap.so.0.8");
    println!("cargo:rerun-if-env-changed=WEIR_SYSTEM_LIBPCAP");
    let path = match std::env::var_os("WEIR_SYSTEM_LIBPCAP") {
        Some(p) => PathBuf::from(p),
        None => CANDIDATES.iter().map(Path::new).find(|p| p.exists()).map(Path::to_path_buf).unwrap_or_else(|| {
            panic!("system libpcap not found (looked in {}); install libpcap0.8 or set WEIR_SYSTEM_LIBPCAP", CANDIDATES.join(", "))
        }),
    };
    println!("cargo:rerun-if-changed={}", path.display());
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("system_data.rs");
    let code = system_data(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::write(&out, code).unwrap_or_else(|e| panic!("{}: {e}", out.display()));
}

/// The Rust statics holding the library's `pcap_version` and `eproto_db`.
fn system_data(path: &Path) -> Result<String, String> {
    // SAFETY: loading libpcap runs only its ELF constructors; the path is absolute.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    // SAFETY: `pcap_version` is a NUL-terminated char array in libpcap 1.x.
    let version = unsafe {
        let sym = lib.get::<*const c_char>(b"pcap_version\0").map_err(|e| e.to_string())?;
        CStr::from_ptr(*sym).to_bytes_with_nul().to_vec()
    };
    let mut entries = Vec::new();
    // SAFETY: `eproto_db` is an array of `struct eproto` ended by a NULL name,
    // read up to that end (bounded by EPROTO_MAX); each name is a C string.
    unsafe {
        let sym = lib.get::<*const Eproto>(b"eproto_db\0").map_err(|e| e.to_string())?;
        let table: *const Eproto = *sym;
        for i in 0..EPROTO_MAX {
            let e = &*table.add(i);
            if e.s.is_null() {
                break;
            }
            entries.push((CStr::from_ptr(e.s).to_bytes().to_vec(), e.p));
        }
    }
    if entries.len() == EPROTO_MAX {
        return Err(format!("eproto_db has no end within {EPROTO_MAX} entries"));
    }
    let mut code = String::new();
    let _ = writeln!(code, "// Copied from {} by build.rs.", path.display());
    let _ = writeln!(code, "#[no_mangle]\n#[allow(non_upper_case_globals)]");
    let _ = writeln!(code, "pub static mut pcap_version: [c_char; {}] = [{}];", version.len(), bytes(&version));
    let _ = writeln!(code, "#[no_mangle]\n#[allow(non_upper_case_globals)]");
    let _ = writeln!(code, "pub static mut eproto_db: [Eproto; {}] = [", entries.len() + 1);
    for (name, p) in &entries {
        let escaped: String = name.iter().map(|b| format!("\\x{b:02x}")).collect();
        let _ = writeln!(code, "    Eproto {{ s: c\"{escaped}\".as_ptr(), p: {p:#06x} }},");
    }
    let _ = writeln!(code, "    Eproto {{ s: std::ptr::null(), p: 0 }},\n];");
    Ok(code)
}

fn bytes(b: &[u8]) -> String {
    b.iter().map(|b| format!("{b}_u8 as c_char")).collect::<Vec<_>>().join(", ")
}
