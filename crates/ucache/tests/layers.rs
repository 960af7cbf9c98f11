//! The core's modules import one way (docs/design.md, "Module layers"): the budget and the
//! eviction round know nothing of mappings, and no module below the mappings names them.
//! Reads the sources as text, as the grep in that section does: the `crate::x` paths each
//! top-level module's files name, comment lines left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every top-level module of `src`, with the modules its files name.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut modules = BTreeSet::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        // `x.rs`, and directory modules without one (`policy/mod.rs`, `store/mod.rs`).
        if p.is_dir() || p.extension().is_some_and(|x| x == "rs") {
            modules.insert(p.file_stem().unwrap().to_str().unwrap().to_string());
        }
    }
    modules
        .into_iter()
        .map(|m| {
            let mut files = vec![src.join(format!("{m}.rs"))];
            collect(&src.join(&m), &mut files);
            let names = names_in(&files, &m);
            (m, names)
        })
        .collect()
}

/// The modules `files` name as `crate::x` outside comment lines, `own` left out.
fn names_in(files: &[PathBuf], own: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for f in files.iter().filter(|f| f.exists()) {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let name: String = line[at + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() && name != own {
                    names.insert(name);
                }
            }
        }
    }
    names
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The modules `from` reaches through the graph, itself excluded unless on a cycle.
fn reach(g: &BTreeMap<String, BTreeSet<String>>, from: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<&str> = g[from].iter().map(String::as_str).collect();
    while let Some(m) = todo.pop() {
        if seen.insert(m.to_string()) {
            if let Some(next) = g.get(m) {
                todo.extend(next.iter().map(String::as_str));
            }
        }
    }
    seen
}

#[test]
fn no_module_below_the_facade_reaches_up_to_it_or_to_the_mappings() {
    let g = graph();
    assert!(
        g.contains_key("mapping") && g.contains_key("budget"),
        "{g:?}"
    );
    for (m, _) in g
        .iter()
        .filter(|(m, _)| !["cache", "lib", "mapping"].contains(&m.as_str()))
    {
        let r = reach(&g, m);
        for up in ["cache", "mapping"] {
            assert!(!r.contains(up), "{m} reaches {up}: {:?}", g[m]);
        }
    }
    // The budget knows nothing of what shares it, nor the eviction round of the budget.
    for low in ["budget", "reclaim", "evictor", "io_worker"] {
        assert!(
            !reach(&g, low).contains("shared"),
            "{low} reaches the shared core"
        );
    }
    assert!(
        !reach(&g, "reclaim").contains("budget"),
        "reclaim reaches the budget"
    );
}

/// No module reaches itself: where two modules must talk both ways, the lower one offers a
/// narrow trait or takes a function, and names nothing of the upper one.
#[test]
fn no_module_is_on_an_import_cycle() {
    let g = graph();
    for m in g.keys() {
        if reach(&g, m).contains(m) {
            panic!("import cycle: {}", cycle_through(&g, m).join(" → "));
        }
    }
}

/// A shortest path of names from `m` back to itself (breadth first), for the failure message.
fn cycle_through(g: &BTreeMap<String, BTreeSet<String>>, m: &str) -> Vec<String> {
    let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
    let mut todo = std::collections::VecDeque::from([m]);
    while let Some(at) = todo.pop_front() {
        for next in g.get(at).into_iter().flatten() {
            if next == m {
                let mut path = vec![m.to_string()];
                let mut back = at;
                while back != m {
                    path.push(back.to_string());
                    back = came_from[back];
                }
                path.push(m.to_string());
                path.reverse();
                return path;
            }
            if !came_from.contains_key(next.as_str()) {
                came_from.insert(next, at);
                todo.push_back(next);
            }
        }
    }
    unreachable!("{m} reaches itself")
}
