//! The image catalog of the reference assembly's process runtime, and
//! `orchestra images`, which lists it.
//!
//! `orchestra/pause` and `orchestra/echo` are programs of this binary
//! (`orchestra image pause|echo`). `busybox` and `alpine` stand for the
//! host's shell, so the usual `image: busybox` + `command: [sh, -c, ...]`
//! pods run that command on the host. Any other image fails to pull, as an
//! unknown image does on Kubernetes (ErrImagePull, then ImagePullBackOff).

use orchestra_node::runtime::images::{ImageCatalog, ImageEntry};

/// Options of `orchestra images`.
#[derive(clap::Args)]
pub struct Args {}

/// The catalog: this binary's images and the host shell's.
pub fn catalog() -> Result<ImageCatalog, Box<dyn std::error::Error>> {
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let size = std::fs::metadata(&exe).map(|m| m.len()).unwrap_or(0);
    let mut builder = ImageCatalog::builder();
    for (name, _) in super::image::IMAGES {
        let program = name.rsplit('/').next().expect("a name");
        builder = builder.image(name, ImageEntry::new([exe.as_str(), "image", program]).size_bytes(size));
    }
    for shell in ["busybox", "alpine"] {
        builder = builder.image(shell, ImageEntry::new(["sh"]).size_bytes(0));
    }
    Ok(builder.build()?)
}

/// Prints the catalog: image, what it runs, what it is.
pub async fn run(_args: Args) -> Result<(), Box<dyn std::error::Error>> {
    println!("{:<20} DESCRIPTION", "IMAGE");
    for (name, about) in super::image::IMAGES {
        println!("{name:<20} {about}");
    }
    for shell in ["busybox", "alpine"] {
        println!("{shell:<20} the host's sh (use with command: [sh, -c, ...])");
    }
    // The catalog must build: the same check `orchestra up` makes.
    catalog()?;
    Ok(())
}
