//! The README's capability table is the code's declaration, rendered.
//!
//! When a store's declaration changes, regenerate the table with
//! `FERRISSON_BLESS=1 cargo test -p ferrisson --test capability_table` and review the diff.

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
