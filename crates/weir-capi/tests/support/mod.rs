//! Building and running C programs against this build's `libweirstream.so`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding this build's libweirstream.so: the test binary is
/// in `<target>/<profile>/deps`, and cargo builds the library (cdylib and
/// rlib at once) into that directory before the tests that link it.
pub fn library_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let deps = exe.parent().expect("the test's directory").to_path_buf();
    for dir in [deps.clone(), deps.parent().map(Path::to_path_buf).unwrap_or_default()] {
        if dir.join("libweirstream.so").exists() {
            return dir;
        }
    }
    panic!("libweirstream.so is neither in {} nor beside it: build weir-capi first", deps.display());
}

/// The C program `source`, built into `out` against `include/weir_stream.h`
/// and the library. Its loader finds the library through `LD_LIBRARY_PATH`,
/// which [`command`] sets to this build's directory alone (cargo's own
/// `LD_LIBRARY_PATH` also names `<target>/<profile>`, where an older copy of
/// the library may lie, and the loader looks there before any run path).
pub fn compile(source: &Path, out: &Path) -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = out.join(source.file_stem().expect("a file name"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o"])
        .arg(&bin)
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg(source)
        .arg(format!("-L{}", library_dir().display()))
        .args(["-lweirstream", "-lpthread"])
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(status.success(), "{cc} failed on {}", source.display());
    bin
}

/// A command running `bin` against this build's library.
pub fn command(bin: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env("LD_LIBRARY_PATH", library_dir());
    c
}
