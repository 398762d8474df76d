//! The cgroup a container node and its pods live in, in every cgroup v1 hierarchy of the machine
//! (and in the v2 one, on a machine with only that), so that whatever the node started can be
//! found and ended, and nothing of it stays on the machine.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// Where the cgroup hierarchies are mounted.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Ends every process in the cgroup `$1` (a name under each hierarchy) and in its children, then
/// removes them, deepest first. Run by the node's watchdog, when the node is dropped and when
/// this process dies.
pub(crate) const CLEANUP: &str = r#"
name="$1"
i=0
while [ "$i" -lt 100 ]; do
  pids="$(find /sys/fs/cgroup/*/"$name" /sys/fs/cgroup/"$name" -name cgroup.procs -exec cat {} + 2>/dev/null)"
  [ -n "$pids" ] || break
  kill -KILL $pids 2>/dev/null
  sleep 0.1
  i=$((i + 1))
done
for hierarchy in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
  if [ -d "$hierarchy$name" ]; then find "$hierarchy$name" -depth -type d -exec rmdir {} + 2>/dev/null; fi
done
true
"#;

/// A cgroup named `testenv-node-<id>` under the root of every hierarchy, `cpuset`'s with its
/// parent's CPUs and memory nodes (a new cpuset cgroup has none). Dropping it ends what is left in
/// it and removes it ([`CLEANUP`]).
#[derive(Debug)]
pub(crate) struct NodeCgroup {
    name: String,
}

impl NodeCgroup {
    /// Creates it in every hierarchy.
    pub(crate) fn create(id: &str) -> Result<NodeCgroup, Error> {
        let name = format!("testenv-node-{id}");
        let cgroup = NodeCgroup { name: name.clone() };
        for hierarchy in hierarchies()? {
            let path = hierarchy.join(&name);
            std::fs::create_dir_all(&path).map_err(Error::io(format!("creating the cgroup {}", path.display())))?;
            if hierarchy.ends_with("cpuset") {
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    let parent = std::fs::read_to_string(hierarchy.join(file))
                        .map_err(Error::io(format!("reading {}", hierarchy.join(file).display())))?;
                    std::fs::write(path.join(file), parent.trim())
                        .map_err(Error::io(format!("writing {}", path.join(file).display())))?;
                }
            }
        }
        Ok(cgroup)
    }

    /// Its name, the same in every hierarchy (the kubelet's `cgroupRoot` is `/<name>`).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for NodeCgroup {
    fn drop(&mut self) {
        // Nothing to do on failure: the node's watchdog ran the same script before.
        let _ = Command::new("sh").args(["-c", CLEANUP, "testenv-cleanup", &self.name]).status();
    }
}

/// The mounted cgroup hierarchies: each v1 controller's directory (and a named or v2 one), or the
/// root itself when it is a unified (v2) mount.
fn hierarchies() -> Result<Vec<PathBuf>, Error> {
    let root = Path::new(CGROUP_ROOT);
    if root.join("cgroup.controllers").exists() {
        return Ok(vec![root.to_owned()]);
    }
    let entries = std::fs::read_dir(root).map_err(Error::io(format!("listing {CGROUP_ROOT}")))?;
    let mut found = Vec::new();
    for entry in entries {
        let path = entry.map_err(Error::io(format!("listing {CGROUP_ROOT}")))?.path();
        // A v1 hierarchy has cgroup.procs at its root; symlinks (cpu,cpuacct) repeat another.
        let is_link = path.symlink_metadata().map(|meta| meta.file_type().is_symlink()).unwrap_or(true);
        if !is_link && path.join("cgroup.procs").exists() {
            found.push(path);
        }
    }
    Ok(found)
}
