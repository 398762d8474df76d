//! ARCHITECTURE.md's map held to the tree: it names every crate of the workspace and every folder
//! of `src/` and `core/src/` (and nothing else), and one approved CSR's path is a chain of calls
//! the code makes.
//!
//! A station is on the path when it is linked to the one before it: entered by a call that one of
//! the two files defines (`fn`, `struct`, … of its last segment) and the other writes as the map
//! quotes it (`self.api.write`, outside comments and test modules), or by a return ("back") to the
//! station that called the one it leaves. A side call is linked the same way to its station, or to the file
//! before it after a `→`. So a file renamed or gone, a call no longer made, and a station left out
//! of the map (its neighbours then name no call of each other) each break a link.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::documents::{quoted, section};
use super::{read, repo};

/// The rows of the table in `text` whose header row starts with `header`, as cells.
fn table<'a>(text: &'a str, header: &str) -> Vec<Vec<&'a str>> {
    let start = text.find(&format!("\n{header}")).unwrap_or_else(|| panic!("no table {header:?}"));
    text[start + 1..]
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            cells[1..cells.len() - 1].to_vec()
        })
        .collect()
}

/// The first text between backticks of each row's first cell.
fn first_names<'a>(rows: &[Vec<&'a str>]) -> BTreeSet<&'a str> {
    rows.iter().map(|row| *quoted(row[0]).first().unwrap_or_else(|| panic!("no name in {row:?}"))).collect()
}

/// A file of the path as the map names it: from `core/src/` when it says so, else from `src/`.
fn path_of(named: &str) -> PathBuf {
    if named.starts_with("core/src/") { repo().join(named) } else { repo().join("src").join(named) }
}

/// The code of `file`: its test module and comments left out.
fn code(file: &str) -> String {
    let path = path_of(file);
    assert!(path.is_file(), "ARCHITECTURE.md's map names {file}, which does not exist");
    let text = read(&path);
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or_default();
    code.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether `code` writes `call` as it stands: not as part of a longer name or path.
fn writes(code: &str, call: &str) -> bool {
    code.match_indices(call).any(|(at, _)| {
        let before = code[..at].chars().next_back();
        let after = code[at + call.len()..].chars().next();
        !before.is_some_and(|c| is_ident(c) || c == '.' || c == ':') && !after.is_some_and(is_ident)
    })
}

/// Whether `code` defines the item `call` ends with (`write` of `self.api.write`).
fn defines(code: &str, call: &str) -> bool {
    let item = call.rsplit(['.', ':']).next().unwrap_or(call);
    ["fn", "struct", "enum", "trait", "const", "static", "type"]
        .iter()
        .any(|keyword| writes(code, &format!("{keyword} {item}")))
}

/// What is wrong with the link from the file `caller` to `callee` through `call`, if anything.
fn broken_link(caller: &str, callee: &str, call: &str) -> Option<String> {
    let linked = defines(&code(callee), call) && writes(&code(caller), call);
    (!linked)
        .then(|| format!("{caller} does not reach {callee} by `{call}` ({callee} must define it, {caller} write it)"))
}

/// What is wrong with the link from the station `from` to `to` by `call` (either may be the
/// caller), if anything.
fn station_link(from: &str, to: &str, call: &str) -> Option<String> {
    broken_link(from, to, call)
        .and(broken_link(to, from, call))
        .map(|_| format!("{from} does not reach {to} by `{call}`: neither file defines it while the other writes it"))
}

/// The path's stations: each one's file, how it is reached, its side calls.
fn stations(architecture: &str) -> Vec<(String, String, String)> {
    let map = section(architecture, "## Map");
    table(map, "| # | station | reached by | side calls")
        .iter()
        .enumerate()
        .map(|(i, row)| {
            let [number, station, reached, side] = row[..] else { panic!("a row of four cells: {row:?}") };
            assert_eq!(number, (i + 1).to_string(), "the stations are numbered in order");
            let [file] = quoted(station)[..] else { panic!("one file per station: {station}") };
            (file.to_owned(), reached.to_owned(), side.to_owned())
        })
        .collect()
}

/// What is wrong with the path of `architecture`'s map, held to the tree.
fn broken_path(architecture: &str) -> Vec<String> {
    let stations = stations(architecture);
    assert!(stations.len() >= 5, "{stations:?}");
    let mut broken = Vec::new();
    // The stations called and not yet returned from, the latest last.
    let mut calls: Vec<&str> = Vec::new();
    for (i, (file, reached, side)) in stations.iter().enumerate() {
        if reached == "back" {
            calls.pop();
            if calls.last() != Some(&file.as_str()) {
                broken.push(format!("station {} returns to {file}, which is not the caller: {calls:?}", i + 1));
            }
        } else {
            if let Some(&before) = calls.last() {
                let [call] = quoted(reached)[..] else { panic!("one call reaches station {}: {reached}", i + 1) };
                broken.extend(station_link(before, file, call));
            }
            calls.push(file.as_str());
        }
        for chain in side.split(';').filter(|chain| !chain.trim().is_empty()) {
            let mut caller = file.as_str();
            for link in chain.split('→') {
                let [callee, made @ ..] = &quoted(link)[..] else { panic!("a file and its calls: {link}") };
                assert!(!made.is_empty() && callee.ends_with(".rs"), "a file and its calls: {link}");
                broken.extend(made.iter().filter_map(|call| broken_link(caller, callee, call)));
                caller = callee;
            }
        }
    }
    broken
}

#[test]
fn each_station_of_the_map_s_path_is_linked_to_the_one_before_it_by_the_call_the_map_names() {
    let broken = broken_path(&read(&repo().join("ARCHITECTURE.md")));
    assert!(broken.is_empty(), "ARCHITECTURE.md's map is not the path the code takes:\n{}", broken.join("\n"));
}

/// The folders directly inside `dir`, as `prefix` + name + `/`.
fn folders(dir: &Path, prefix: &str) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_dir())
        .map(|path| format!("{prefix}{}/", path.file_name().unwrap().to_str().unwrap()))
        .collect()
}

/// The `.rs` files directly inside `dir` without a folder of their name.
fn loose_files(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "rs") && !path.with_extension("").is_dir())
        .map(|path| path.file_name().unwrap().to_str().unwrap().to_owned())
        .collect()
}

#[test]
fn the_map_names_every_crate_and_folder_and_every_loose_file_of_src() {
    let architecture = read(&repo().join("ARCHITECTURE.md"));
    let map = section(&architecture, "## Map");
    let manifest = read(&repo().join("Cargo.toml"));
    let listed = |key: &str| -> Vec<String> {
        let list = manifest.split(&format!("\n{key} = [")).nth(1).unwrap_or_else(|| panic!("no {key}"));
        list[..list.find(']').unwrap()].split('"').skip(1).step_by(2).map(str::to_owned).collect()
    };
    let crates: BTreeSet<String> = listed("members").into_iter().chain(listed("exclude")).collect();
    let named: BTreeSet<String> = first_names(&table(map, "| crate |")).into_iter().map(str::to_owned).collect();
    assert_eq!(named, crates, "the map's crates, and the workspace's (members and excluded)");

    let rows = table(map, "| folder |");
    let named: BTreeSet<String> = first_names(&rows).into_iter().map(str::to_owned).collect();
    let mut expected = folders(&repo().join("src"), "src/");
    expected.extend(folders(&repo().join("core/src"), "core/src/"));
    expected.extend(["src/".to_owned(), "core/src/".to_owned()]);
    assert_eq!(named, expected, "the map's folders, and those of src/ and core/src/");
    for root in ["src/", "core/src/"] {
        let row = rows.iter().find(|row| quoted(row[0]).first() == Some(&root)).unwrap();
        let files: BTreeSet<String> =
            quoted(row[1]).into_iter().filter(|name| name.ends_with(".rs")).map(str::to_owned).collect();
        assert_eq!(files, loose_files(&repo().join(root)), "the files of {root} the map lists");
    }
}
