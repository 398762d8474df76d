//! A throwaway containerd: its root, state, sockets and configuration in one temporary directory,
//! the CRI plugin and everything that would write outside that directory disabled. Dropping it
//! stops containerd, unmounts whatever it left mounted there and removes the directory.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Why the test cannot run here, if it cannot: it needs root, `containerd` and `ctr`.
pub fn unavailable() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let euid = status.lines().find_map(|line| line.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1));
    if euid != Some("0") {
        return Some("it needs root (containerd mounts snapshots)".to_owned());
    }
    for tool in ["containerd", "ctr"] {
        if Command::new(tool).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_err() {
            return Some(format!("{tool} is not installed (Debian: apt-get install containerd)"));
        }
    }
    None
}

/// A running containerd.
pub struct Containerd {
    child: Child,
    dir: tempfile::TempDir,
}

/// The mount points of /proc/self/mounts under `dir` (octal escapes of spaces and the like left
/// as they are: the temporary directory's name has none).
pub fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    mounts
        .lines()
        .filter_map(|line| line.split_whitespace().nth(1))
        .map(PathBuf::from)
        .filter(|point| point.starts_with(dir))
        .collect()
}

impl Containerd {
    /// Starts containerd and waits (at most 20 s) for its socket.
    pub fn start() -> Containerd {
        // Short: a unix socket path has at most 107 bytes.
        let dir = tempfile::Builder::new().prefix("ncsr-containerd.").tempdir_in("/tmp").unwrap();
        let path = dir.path();
        let config = format!(
            r#"version = 2
root = "{root}/root"
state = "{root}/state"
# cri would start serving a kubelet; opt installs into /opt/containerd; the others need devices or
# file systems of their own.
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]
[grpc]
  address = "{root}/containerd.sock"
[ttrpc]
  address = "{root}/containerd.sock.ttrpc"
[debug]
  address = "{root}/debug.sock"
"#,
            root = path.display()
        );
        std::fs::write(path.join("config.toml"), config).unwrap();
        let log = std::fs::File::create(path.join("containerd.log")).unwrap();
        let child = Command::new("containerd")
            .arg("--config")
            .arg(path.join("config.toml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut containerd = Containerd { child, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while !containerd.socket().exists() {
            if let Some(status) = containerd.child.try_wait().unwrap() {
                panic!("containerd exited with {status}:\n{}", containerd.log());
            }
            assert!(Instant::now() < deadline, "containerd did not listen within 20 s:\n{}", containerd.log());
            std::thread::sleep(Duration::from_millis(50));
        }
        containerd
    }

    /// The directory holding all of its files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn socket(&self) -> PathBuf {
        self.dir().join("containerd.sock")
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir().join("containerd.log")).unwrap_or_default()
    }

    /// `ctr --address SOCKET -n k8s.io ARGS...`, the namespace the kubelet's CRI uses.
    pub fn ctr(&self) -> Command {
        let mut command = Command::new("ctr");
        command.arg("--address").arg(self.socket()).args(["--namespace", "k8s.io"]);
        command
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        // SIGTERM lets containerd close its sockets and database; SIGKILL after 10 s.
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        // The deepest first, so that nested mounts come off before their parents.
        let mut points = mounts_under(self.dir());
        points.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
        for point in points {
            let _ = Command::new("umount").arg("--lazy").arg(&point).status();
        }
    }
}
