//! Builds weir's eBPF programs (`ebpf/*.c` at the workspace root) with clang into
//! `OUT_DIR`, where `include_bytes!` embeds them in the library.
//!
//! clang is taken from `$CLANG`, else from `PATH`. Without it the build stops
//! with the command that installs it; `scripts/setup` installs it too.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Programs to build: source under `ebpf/`, object name in `OUT_DIR`, and
/// the BPF instruction set, when not clang's default. The kernel cutoff's
/// programs need v3 for the atomic OR of their counters (kernel 5.12+); the
/// fanout program keeps the default, under which the verifier takes its
/// unrolled hash within its instruction limit (with v3's 32-bit
/// instructions it does not).
const PROGRAMS: &[(&str, &str, Option<&str>)] = &[
    ("weir_xdp.c", "weir_xdp.o", Some("-mcpu=v3")),
    ("weir_fanout.c", "weir_fanout.o", None),
    ("weir_cutoff_filter.c", "weir_cutoff_filter.o", Some("-mcpu=v3")),
    ("weir_gen.c", "weir_gen.o", Some("-mcpu=v3")),
    ("weir_fwd.c", "weir_fwd.o", Some("-mcpu=v3")),
    ("weir_xring.c", "weir_xring.o", Some("-mcpu=v3")),
];
/// Headers the programs include: a change rebuilds them all.
const HEADERS: &[&str] = &["weir_cutoff.h"];

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let src_dir = manifest.join("../../ebpf");
    let src_dir = src_dir.canonicalize().unwrap_or(src_dir);
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let clang = env::var_os("CLANG").unwrap_or_else(|| "clang".into());
    println!("cargo:rerun-if-env-changed=CLANG");
    // <asm/types.h>, which <linux/bpf.h> includes, lives in the multiarch folder of
    // the machine that builds, and `-target bpf` alone does not look there.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("/usr/include/{arch}-linux-gnu");
    for h in HEADERS {
        println!("cargo:rerun-if-changed={}", src_dir.join(h).display());
    }
    for (src, obj, cpu) in PROGRAMS {
        let src = src_dir.join(src);
        println!("cargo:rerun-if-changed={}", src.display());
        compile(&clang, &src, &out_dir.join(obj), &multiarch, *cpu);
    }
}

fn compile(clang: &std::ffi::OsStr, src: &Path, obj: &Path, multiarch: &str, cpu: Option<&str>) {
    // -g: the BTF that describes the maps (aya and the kernel read it).
    let status = Command::new(clang)
        .args(["-O2", "-g", "-Wall", "-Werror", "-target", "bpf", "-I", multiarch, "-c"])
        .args(cpu)
        .arg(src)
        .arg("-o")
        .arg(obj)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => panic!(
            "clang failed ({s}) compiling {}: is libbpf-dev installed (bpf/bpf_helpers.h)? \
             `apt-get install clang libbpf-dev`, or run scripts/setup",
            src.display()
        ),
        Err(e) => panic!(
            "cannot run clang ({e}): weir's eBPF programs (here {}) are C built with clang. \
             Install it with `apt-get install clang libbpf-dev`, or run scripts/setup",
            src.display()
        ),
    }
}
