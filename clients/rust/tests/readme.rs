//! The README quotes the examples as they are: each ```rust block after a
//! link to examples/NAME.rs is a run of that file's lines (the examples
//! themselves are built by cargo test and run against a server by the
//! conformance scripts).

use std::fs;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn trimmed(text: &str) -> Vec<&str> {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect()
}

#[test]
fn readme_quotes_the_examples() {
    let readme = fs::read_to_string(format!("{ROOT}/README.md")).unwrap();
    let mut quoted = 0;
    for (i, part) in readme.split("](examples/").enumerate().skip(1) {
        let name = part.split(')').next().unwrap();
        let source = fs::read_to_string(format!("{ROOT}/examples/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"));
        let block = part.split("```rust\n").nth(1).and_then(|b| b.split("```").next()).expect("a rust block");
        let (want, have) = (trimmed(block), trimmed(&source));
        assert!(
            have.windows(want.len()).any(|w| w == want.as_slice()),
            "README block {i} is not a run of the lines of examples/{name}"
        );
        quoted += 1;
    }
    assert_eq!(quoted, 2, "the session example and the v1 example");
}
