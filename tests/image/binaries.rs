//! The two static binaries the image carries, each run on this machine: natively for amd64, under
//! QEMU user emulation (`qemu-aarch64-static`) for arm64; and what their ELF files hold.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use object::{Object, ObjectSection};

use crate::layout::run;

/// The image's architectures, each with its Rust target and the variable naming a prebuilt binary.
pub const ARCHES: [Arch; 2] = [
    Arch { oci: "amd64", target: "x86_64-unknown-linux-musl", env: "NODE_CSR_APPROVER_BIN" },
    Arch { oci: "arm64", target: "aarch64-unknown-linux-musl", env: "NODE_CSR_APPROVER_BIN_ARM64" },
];

/// One architecture of the image.
#[derive(Debug, Clone, Copy)]
pub struct Arch {
    /// The OCI platform's architecture.
    pub oci: &'static str,
    /// The Rust target its binary is built for.
    pub target: &'static str,
    /// The environment variable that names a prebuilt binary (scripts/test.sh sets both).
    pub env: &'static str,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

impl Arch {
    /// The static binary: `$env` when set, else the one `scripts/check-static-binary.sh --target`
    /// builds (minutes the first time).
    pub fn binary(&self) -> &'static Path {
        static BINARIES: [OnceLock<PathBuf>; 2] = [OnceLock::new(), OnceLock::new()];
        let slot = &BINARIES[usize::from(self.oci == "arm64")];
        slot.get_or_init(|| match std::env::var_os(self.env) {
            Some(path) => PathBuf::from(path),
            None => {
                let mut script = Command::new(root().join("scripts/check-static-binary.sh"));
                let stdout = run(script.args(["--target", self.target]));
                PathBuf::from(String::from_utf8(stdout).unwrap().lines().last().unwrap())
            }
        })
    }

    /// A command running `binary` (built for this architecture) here.
    pub fn command(&self, binary: &Path) -> Command {
        if self.oci == "amd64" {
            assert_eq!(std::env::consts::ARCH, "x86_64", "the amd64 binary runs natively on x86_64 only");
            return Command::new(binary);
        }
        let qemu = "qemu-aarch64-static";
        let found = Command::new(qemu).arg("--version").output().is_ok_and(|output| output.status.success());
        assert!(
            found,
            "{qemu} is missing: apt-get install qemu-user-static (scripts/check-static-binary.sh --target {} installs it)",
            self.target
        );
        let mut command = Command::new(qemu);
        command.arg(binary);
        command
    }

    /// jemalloc's page size in `binary`, as its statistics print it at exit.
    pub fn jemalloc_page_size(&self, binary: &Path) -> u64 {
        let mut command = self.command(binary);
        // tikv-jemalloc-sys prefixes jemalloc's symbols and so its variable with `_rjem_`.
        command.arg("--version").env("_RJEM_MALLOC_CONF", "stats_print:true");
        let output = command.output().unwrap();
        assert!(output.status.success(), "{command:?}: {}", String::from_utf8_lossy(&output.stderr));
        let text = String::from_utf8_lossy(&output.stderr).into_owned() + &String::from_utf8_lossy(&output.stdout);
        let line = text.lines().find_map(|line| line.trim().strip_prefix("Page size: "));
        line.and_then(|size| size.trim().parse().ok())
            .unwrap_or_else(|| panic!("{command:?} printed no jemalloc statistics with a page size:\n{text}"))
    }
}

/// The bytes of ELF section `name` of `binary`, if it has one.
pub fn elf_section(binary: &[u8], name: &str) -> Option<Vec<u8>> {
    let file = object::File::parse(binary).unwrap();
    file.section_by_name(name).map(|section| section.data().unwrap().to_vec())
}
