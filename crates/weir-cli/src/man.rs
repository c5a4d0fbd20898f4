//! `weir man DIR`: the man pages, `weir.1` and one `weir-COMMAND.1` per
//! command, rendered by clap_mangen from the same clap definitions as
//! `--help`, so a page and the help never disagree. `make install` installs
//! them; the command is hidden from `--help`, as it serves the build.

use anyhow::Context;
use clap::{Args, CommandFactory};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct ManArgs {
    /// The directory the pages are written into (made if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

pub fn run(args: ManArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.dir).with_context(|| format!("{}: cannot make the directory", args.dir.display()))?;
    let weir = crate::Cli::command();
    write_page(&args.dir, "weir", weir.clone())?;
    let mut pages = 1;
    for sub in weir.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("weir-{}", sub.get_name());
        // The page's name (weir-count), and its synopsis as typed (weir count ...).
        let cmd = sub.clone().name(name.clone()).bin_name(format!("weir {}", sub.get_name()));
        write_page(&args.dir, &name, cmd)?;
        pages += 1;
    }
    eprintln!("weir man: {pages} pages written to {}", args.dir.display());
    Ok(ExitCode::SUCCESS)
}

fn write_page(dir: &Path, name: &str, cmd: clap::Command) -> anyhow::Result<()> {
    let path = dir.join(format!("{name}.1"));
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut page).with_context(|| format!("rendering {name}.1"))?;
    std::fs::write(&path, page).with_context(|| format!("{}: cannot write", path.display()))?;
    Ok(())
}
