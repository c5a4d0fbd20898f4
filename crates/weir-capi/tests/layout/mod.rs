//! Holding a C header's structs to the library's Rust ABI types: a C
//! program prints what the C compiler makes of them.

use std::path::Path;
use std::process::Command;

/// One C struct of a header as the library lays it out: its name in C, a
/// label for the output, Rust's size of it and each field's offset.
pub struct Layout<'a> {
    pub label: &'a str,
    pub c_type: &'a str,
    pub size: usize,
    pub fields: &'a [(&'a str, usize)],
}

/// Builds a C program that includes `header` and prints each struct's size
/// and every field's offset as the C compiler lays them out, runs it, and
/// asserts they are the library's: the header and the Rust ABI types are
/// written apart, and only this holds them together.
pub fn assert_c_layout(header: &str, layouts: &[Layout<'_>]) {
    let mut want = String::new();
    let mut c = format!("#include <stddef.h>\n#include <stdio.h>\n#include \"{header}\"\nint main(void) {{\n");
    for l in layouts {
        c.push_str(&format!("    printf(\"{} %zu\\n\", sizeof({}));\n", l.label, l.c_type));
        want.push_str(&format!("{} {}\n", l.label, l.size));
        for (f, off) in l.fields {
            c.push_str(&format!("    printf(\"{}.{f} %zu\\n\", offsetof({}, {f}));\n", l.label, l.c_type));
            want.push_str(&format!("{}.{f} {off}\n", l.label));
        }
    }
    c.push_str("    return 0;\n}\n");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path().join("layout.c");
    std::fs::write(&src, c).expect("writing layout.c");
    let bin = dir.path().join("layout");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c99", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("include"))
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(status.success(), "{cc} failed on the layout program for {header}");
    let out = Command::new(&bin).output().expect("running the layout program");
    assert_eq!(String::from_utf8_lossy(&out.stdout), want, "{header}'s structs and the library's disagree");
}
