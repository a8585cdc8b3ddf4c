//! The baseline the gate's dense-tree timing is compared with: every `.rs`
//! file under a directory read and parsed with `syn`, one after another.
//!
//! ```sh
//! cargo run --release --example naive_parse -- /tmp/dw-dense
//! ```

use std::path::Path;

fn parse_all(dir: &Path, counts: &mut (usize, usize)) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            parse_all(&path, counts)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path)?;
            match syn::parse_file(&text) {
                Ok(_) => counts.0 += 1,
                Err(_) => counts.1 += 1,
            }
        }
    }
    Ok(())
}

fn main() -> std::io::Result<()> {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: naive_parse DIR");
        std::process::exit(2);
    };
    let mut counts = (0, 0);
    parse_all(Path::new(&dir), &mut counts)?;
    eprintln!("parsed {} files, {} failed", counts.0, counts.1);
    Ok(())
}
