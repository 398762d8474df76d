//! OCI image archives a container node imports, built by `scripts/oci-archive.sh` from local
//! programs: nothing can be pulled here.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::Error;

/// Where Debian's `busybox-static` installs its binary.
const BUSYBOX: &str = "/bin/busybox";

/// The busybox applets a test image links (what `helm test` pods and probes of tests use).
const BUSYBOX_APPLETS: [&str; 8] = ["sh", "wget", "grep", "sleep", "cat", "nc", "nslookup", "ls"];

/// Builds the pod sandbox image [`super::config::PAUSE_IMAGE`] from the `pause` program into
/// `out`.
pub(crate) fn pause(program: &Path, out: &Path) -> Result<PathBuf, Error> {
    let file = format!("{}:/pause:0755", program.display());
    archive(
        &["--name", super::config::PAUSE_IMAGE, "--file", &file, "--entrypoint", "/pause", "--user", "65535:65535"],
        out,
    )
}

/// Builds an image named `name` holding Debian's static busybox with a few applets linked in
/// `/bin` (its entrypoint `sh`), into `out`: what `busybox:<tag>` offers the tests' pods.
pub fn busybox(name: &str, out: &Path) -> Result<PathBuf, Error> {
    let binary = format!("{BUSYBOX}:/bin/busybox:0755");
    let mut args = vec!["--name".to_owned(), name.to_owned(), "--file".to_owned(), binary];
    for applet in BUSYBOX_APPLETS {
        args.extend(["--symlink".to_owned(), format!("/bin/{applet}:busybox")]);
    }
    args.extend(["--dir", "/tmp:1777", "--env", "PATH=/bin", "--entrypoint", "/bin/sh"].map(str::to_owned));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    archive(&args, out)
}

/// Runs `scripts/oci-archive.sh` with `args` and `--output out`.
fn archive(args: &[&str], out: &Path) -> Result<PathBuf, Error> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/oci-archive.sh");
    let output = Command::new("bash")
        .arg(&script)
        .args(args)
        .arg("--output")
        .arg(out)
        .stdin(Stdio::null())
        .output()
        .map_err(Error::io(format!("running {}", script.display())))?;
    if !output.status.success() {
        return Err(Error::Unexpected(format!(
            "{} exited with {}: {}",
            script.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(out.to_owned())
}
