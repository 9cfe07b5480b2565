//! The training examples' command line: `[--eager] [--device DEVICE]
//! [--out PATH | PATH]`, and for the examples that ask for them
//! ([`parse_with`]) `--epochs N`, `--steps N`, `--data DIR` and `--cpu
//! TARGETS`.
#![allow(dead_code)] // each example uses a subset

use std::path::PathBuf;

/// What the command line asks for.
pub struct Args {
    /// Run the training step op by op instead of under `jit`.
    pub eager: bool,
    /// The device the jitted step runs on (`jit_with`'s `JitOpts::device`):
    /// `CPU` by default, `CPU:1`, `CUDA`, ...
    pub device: String,
    /// Where the example writes its output (else its default place):
    /// `--out PATH` or the one positional argument.
    pub path: Option<PathBuf>,
    /// `--epochs N`: how many passes over the training set.
    pub epochs: Option<usize>,
    /// `--steps N`: stop each epoch after N minibatches (a quick run).
    pub steps: Option<usize>,
    /// `--data DIR`: where the data set is.
    pub data: Option<PathBuf>,
    /// `--cpu TARGETS`: the CPU targets an export is built for,
    /// comma-separated (`x86-64-v2,x86-64-v3`).
    pub cpu: Option<String>,
}

/// Parses the command line (`--eager`, `--device`, `--out`, a path);
/// panics with the usage on anything else.
pub fn parse() -> Args {
    parse_with(&[])
}

/// Like [`parse`], also accepting the named options among `--epochs`,
/// `--steps` and `--data`.
pub fn parse_with(extra: &[&str]) -> Args {
    let mut usage = "usage: [--eager] [--device DEVICE]".to_string();
    for (opt, arg) in [
        ("--epochs", "N"),
        ("--steps", "N"),
        ("--data", "DIR"),
        ("--cpu", "TARGETS"),
    ] {
        if extra.contains(&opt) {
            usage += &format!(" [{opt} {arg}]");
        }
    }
    usage += " [--out PATH | PATH]";
    let mut args = Args {
        eager: false,
        device: "CPU".into(),
        path: None,
        epochs: None,
        steps: None,
        data: None,
        cpu: None,
    };
    let mut it = std::env::args_os().skip(1);
    let value = |opt: &str, it: &mut dyn Iterator<Item = std::ffi::OsString>| {
        it.next()
            .unwrap_or_else(|| panic!("{opt} needs a value; {usage}"))
    };
    let count = |opt: &str, v: std::ffi::OsString| -> usize {
        v.to_str()
            .and_then(|s| s.parse().ok())
            .filter(|&n: &usize| n > 0)
            .unwrap_or_else(|| panic!("{opt} needs a positive whole number, not {v:?}"))
    };
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--eager") => args.eager = true,
            Some("--device") => {
                let d = value("--device", &mut it);
                args.device = d
                    .into_string()
                    .unwrap_or_else(|d| panic!("--device {d:?}: not a device name"));
            }
            Some("--out") => args.path = Some(PathBuf::from(value("--out", &mut it))),
            Some(o @ ("--epochs" | "--steps" | "--data" | "--cpu")) if extra.contains(&o) => {
                let v = value(o, &mut it);
                match o {
                    "--epochs" => args.epochs = Some(count(o, v)),
                    "--steps" => args.steps = Some(count(o, v)),
                    "--cpu" => args.cpu = Some(v.to_string_lossy().into_owned()),
                    _ => args.data = Some(PathBuf::from(v)),
                }
            }
            Some(s) if s.starts_with("--") => panic!("unknown option {s}; {usage}"),
            _ if args.path.is_none() => args.path = Some(PathBuf::from(a)),
            _ => panic!("{usage}"),
        }
    }
    args
}

/// Where an example writes its files: `--out`/the positional path, else
/// `target/` (found from the executable's path,
/// `target/<profile>/examples/NAME`), else the temporary directory.
pub fn out_dir(args: &Args) -> PathBuf {
    if let Some(path) = &args.path {
        return path.clone();
    }
    std::env::current_exe()
        .ok()
        .and_then(|exe| {
            let examples = exe.parent()?;
            (examples.file_name()? == "examples")
                .then(|| examples.parent()?.parent().map(PathBuf::from))?
        })
        .unwrap_or_else(std::env::temp_dir)
}
