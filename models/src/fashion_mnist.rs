//! Fashion-MNIST (Xiao, Rasul, Vollgraf 2017): 60,000 training and 10,000 test images of 28x28
//! grey pixels in 10 classes, read from the IDX files that Debian's `dataset-fashion-mnist`
//! installs under `/usr/share/datasets/fashion-mnist/`. Another folder can be given by the spec
//! or by the environment variable `DSGD_FASHION_MNIST`.

use crate::idx::{read_gz, DataError};
use std::path::{Path, PathBuf};

/// Where the Debian package puts the files.
pub const DEFAULT_DIR: &str = "/usr/share/datasets/fashion-mnist";
/// Environment variable that overrides the folder.
pub const ENV_DIR: &str = "DSGD_FASHION_MNIST";
/// Training images in the full Fashion-MNIST.
pub const TRAIN: usize = 60_000;

/// Images (row-major, 784 per image) and labels 0..10. Pixels are kept as the file's bytes and
/// read as `f32` in [0, 1] ([`Split::image`]): a quarter of the memory a process faults in at its
/// start (219 MB as `f32`), and a quarter of the lines a minibatch of random images reads.
#[derive(Clone, Debug)]
pub struct Split {
    /// Pixels, `len() = 784 · labels.len()`.
    pub pixels: Vec<u8>,
    /// Class of each image.
    pub labels: Vec<u8>,
}

impl Split {
    /// Appends image `i`'s pixels as `f32` in [0, 1] (each `p as f32 / 255.0`) to `out`. The
    /// division is computed, not looked up: it vectorises (a table of 256 values does not), so
    /// a minibatch of 32 images is gathered in about half the time, and a division is correctly
    /// rounded on every machine, so the bits are the table's.
    pub fn image(&self, i: usize, out: &mut Vec<f32>) {
        out.extend(self.pixels[i * 784..(i + 1) * 784].iter().map(|&p| p as f32 / 255.0));
    }
    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }
    /// True if there are no images.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }
}

/// The training and test splits.
#[derive(Clone, Debug)]
pub struct FashionMnist {
    /// 60,000 training images.
    pub train: Split,
    /// 10,000 test images.
    pub test: Split,
}

/// The folder to read: `explicit`, else `$DSGD_FASHION_MNIST`, else the Debian location.
pub fn resolve_dir(explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(ENV_DIR).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR))
}

fn split(dir: &Path, images: &str, labels: &str) -> Result<Split, DataError> {
    let (ip, lp) = (dir.join(images), dir.join(labels));
    let img = read_gz(&ip, 3)?;
    let lab = read_gz(&lp, 1)?;
    if img.dims[1..] != [28, 28] {
        return Err(DataError { path: ip, problem: format!("images are {:?}, expected 28x28", &img.dims[1..]) });
    }
    if img.dims[0] != lab.dims[0] {
        return Err(DataError {
            path: lp,
            problem: format!("{} labels for {} images in {}", lab.dims[0], img.dims[0], ip.display()),
        });
    }
    if let Some(bad) = lab.data.iter().find(|&&l| l >= 10) {
        return Err(DataError { path: lp, problem: format!("label {bad} is not a class 0..10") });
    }
    Ok(Split { pixels: img.data, labels: lab.data })
}

impl FashionMnist {
    /// Loads both splits from `dir` (see [`resolve_dir`]).
    pub fn load(dir: &Path) -> Result<Self, DataError> {
        if !dir.join("train-images-idx3-ubyte.gz").exists() {
            return Err(DataError {
                path: dir.to_path_buf(),
                problem: format!(
                    "Fashion-MNIST not found here. Install it with `apt-get install dataset-fashion-mnist` \
                     (it goes to {DEFAULT_DIR}), or point the spec's `workload.data_dir` or ${ENV_DIR} at a folder \
                     holding train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz \
                     and t10k-labels-idx1-ubyte.gz"
                ),
            });
        }
        Ok(FashionMnist {
            train: split(dir, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz")?,
            test: split(dir, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_folder_says_how_to_install_the_data() {
        let e = FashionMnist::load(Path::new("/nonexistent/fm")).unwrap_err();
        assert!(e.to_string().contains("apt-get install dataset-fashion-mnist"), "{e}");
    }

    #[test]
    fn every_byte_reads_as_its_correctly_rounded_fraction_of_255() {
        // Every byte value, in a vectorised image, against one division at a time.
        let pixels: Vec<u8> = (0..784).map(|k| (k * 37 % 256) as u8).collect();
        let split = Split { pixels: pixels.clone(), labels: vec![0] };
        let mut image = Vec::new();
        split.image(0, &mut image);
        let one_at_a_time: Vec<u32> = pixels
            .iter()
            .map(|&p| (std::hint::black_box(p as f32) / std::hint::black_box(255.0f32)).to_bits())
            .collect();
        assert_eq!(image.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), one_at_a_time);
        assert_eq!((image[0], image[pixels.iter().position(|&p| p == 255).unwrap()]), (0.0, 1.0));
    }

    #[test]
    fn the_installed_dataset_has_its_published_shape() {
        let dir = resolve_dir(None);
        if !dir.join("train-images-idx3-ubyte.gz").exists() {
            panic!("{} is missing: .ci/run installs dataset-fashion-mnist", dir.display());
        }
        let d = FashionMnist::load(&dir).unwrap();
        assert_eq!((d.train.len(), d.test.len()), (60_000, 10_000));
        assert_eq!(d.train.pixels.len(), 60_000 * 784);
        let mut image = Vec::new();
        d.train.image(59_999, &mut image);
        assert_eq!(image.len(), 784);
        let last = &d.train.pixels[59_999 * 784..];
        assert!(image.iter().zip(last).all(|(x, &p)| x.to_bits() == (p as f32 / 255.0).to_bits()));
        assert!(image.iter().all(|x| (0.0..=1.0).contains(x)) && image.iter().any(|&x| x > 0.5));
        let mut counts = [0usize; 10];
        d.test.labels.iter().for_each(|&l| counts[l as usize] += 1);
        assert_eq!(counts, [1000; 10], "the test set is balanced");
    }
}
