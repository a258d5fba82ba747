//! The README's capability table is the code's declaration, rendered.
//!
//! When a store's declaration changes, regenerate the table with
//! `FERRISSON_BLESS=1 cargo test -p ferrisson --all-features --test capability_table` and
//! review the diff.

use std::path::Path;

const START: &str = "<!-- capability table: generated from the code, see crates/ferrisson/tests/capability_table.rs -->\n";
const END: &str = "<!-- end of capability table -->";

#[test]
fn the_readme_table_is_the_declared_capabilities() {
    let readme_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    let readme = std::fs::read_to_string(&readme_path).expect("README.md");
    let table = ferrisson::capabilities::markdown_table(&ferrisson::capabilities());
    let (before, rest) = readme
        .split_once(START)
        .expect("README.md has the capability table's start marker");
    let (current, after) = rest
        .split_once(END)
        .expect("README.md has the capability table's end marker");
    if current == table {
        return;
    }
    // A build without some of the stores (`cargo test -p ferrisson` without the database
    // features) checks the blocks of the stores it has; the whole table is checked, and
    // blessed, by a build with all of them (CI's).
    let all_compiled = ferrisson::StoreKind::ALL
        .iter()
        .all(|store| !store.is_available() || store.is_compiled());
    if !all_compiled && std::env::var_os("FERRISSON_BLESS").is_none() {
        let declared = ferrisson::capabilities();
        for store in ferrisson::StoreKind::ALL.iter().filter(|s| s.is_compiled()) {
            let mine: Vec<_> = declared
                .iter()
                .copied()
                .filter(|c| c.store == store.name())
                .collect();
            let block = ferrisson::capabilities::markdown_table(&mine);
            assert!(
                current.contains(&block),
                "README.md's capability table lacks or misstates {}; expected:\n{block}",
                store.name()
            );
        }
        return;
    }
    if std::env::var_os("FERRISSON_BLESS").is_some() {
        std::fs::write(&readme_path, format!("{before}{START}{table}{END}{after}"))
            .expect("README.md written");
        return;
    }
    panic!(
        "README.md's capability table differs from the code's declarations; \
         rerun with FERRISSON_BLESS=1 to regenerate it. Expected:\n{table}"
    );
}

#[test]
fn every_store_of_this_build_declares_its_primitives() {
    let all = ferrisson::capabilities();
    for store in ferrisson::StoreKind::ALL {
        let declared = all.iter().filter(|c| c.store == store.name()).count();
        assert_eq!(
            declared > 0,
            store.is_compiled(),
            "{}: {declared} declarations",
            store.name()
        );
    }
}
