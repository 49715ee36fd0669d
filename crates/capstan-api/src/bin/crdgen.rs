//! Writes the CRD YAML under `config/crd/` (or the directory given as the first argument).

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = PathBuf::from(
        std::env::args()
            .nth(1)
            .unwrap_or_else(|| "config/crd".to_owned()),
    );
    std::fs::create_dir_all(&dir)?;
    for (file, crd) in capstan_api::crd::crds() {
        let path = dir.join(file);
        std::fs::write(&path, capstan_api::crd::to_yaml(&crd)?)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
