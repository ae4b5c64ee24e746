//! The committed include/manyfold.h is what cbindgen makes of the sources
//! now, so the header C programs build against cannot go stale.

use std::path::Path;

#[test]
fn committed_header_matches_the_sources() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses the crate");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let fresh = String::from_utf8(fresh).expect("the header is UTF-8");
    let path = dir.join("include/manyfold.h");
    if std::env::var_os("MANYFOLD_BLESS_HEADER").is_some() {
        std::fs::write(&path, &fresh).expect("write include/manyfold.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if committed != fresh {
        let line = committed.lines().zip(fresh.lines()).position(|(a, b)| a != b);
        panic!(
            "include/manyfold.h is stale (first difference at line {}); regenerate it with\n  \
             MANYFOLD_BLESS_HEADER=1 cargo test -p manyfold-ffi --test header\nand commit it",
            line.map_or_else(|| "end".to_string(), |l| (l + 1).to_string())
        );
    }
}
