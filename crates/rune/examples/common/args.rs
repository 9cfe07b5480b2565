//! The training examples' command line: `[--eager] [--device DEVICE] [PATH]`.

use std::path::PathBuf;

/// What the command line asks for.
pub struct Args {
    /// Run the training step op by op instead of under `jit`.
    pub eager: bool,
    /// The device the jitted step runs on (`jit_with`'s `JitOpts::device`):
    /// `CPU` by default, `CPU:1`, `CUDA`, ...
    pub device: String,
    /// Where the example writes its output (else its default place).
    pub path: Option<PathBuf>,
}

/// Parses the command line; panics with the usage on anything else.
pub fn parse() -> Args {
    let usage = "usage: [--eager] [--device DEVICE] [PATH]";
    let mut args = Args {
        eager: false,
        device: "CPU".into(),
        path: None,
    };
    let mut it = std::env::args_os().skip(1);
    while let Some(a) = it.next() {
        match a.to_str() {
            Some("--eager") => args.eager = true,
            Some("--device") => {
                let d = it
                    .next()
                    .unwrap_or_else(|| panic!("--device needs a name; {usage}"));
                args.device = d.into_string().unwrap_or_else(|_| panic!("{usage}"));
            }
            Some(s) if s.starts_with("--") => panic!("unknown option {s}; {usage}"),
            _ if args.path.is_none() => args.path = Some(PathBuf::from(a)),
            _ => panic!("{usage}"),
        }
    }
    args
}
