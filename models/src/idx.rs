//! The IDX format of (Fashion-)MNIST, gzip-compressed: a magic number (two zero bytes, a type
//! byte, a dimension count), big-endian 32-bit dimensions, then the data. Every malformed input
//! is an error naming the file: a wrong magic number, a short file, a count that disagrees.

use flate2::read::GzDecoder;
use std::io::Read;
use std::path::{Path, PathBuf};

/// A problem reading a data file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {problem}", path.display())]
pub struct DataError {
    /// The file (or folder).
    pub path: PathBuf,
    /// What is wrong.
    pub problem: String,
}

fn err<T>(path: &Path, problem: impl Into<String>) -> Result<T, DataError> {
    Err(DataError { path: path.to_path_buf(), problem: problem.into() })
}

/// An unsigned-byte IDX array: its dimensions and its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct IdxArray {
    /// Dimensions, outermost first (e.g. `[60000, 28, 28]`).
    pub dims: Vec<usize>,
    /// The values, row-major.
    pub data: Vec<u8>,
}

/// Parses an uncompressed IDX byte string of unsigned bytes with `want_dims` dimensions.
pub fn parse(path: &Path, bytes: &[u8], want_dims: usize) -> Result<IdxArray, DataError> {
    let (dims, header) = check(path, bytes, want_dims)?;
    Ok(IdxArray { dims, data: bytes[header..].to_vec() })
}

/// [`parse`] of bytes it may keep: the data moves to the front of them, no copy is made.
fn parse_owned(path: &Path, mut bytes: Vec<u8>, want_dims: usize) -> Result<IdxArray, DataError> {
    let (dims, header) = check(path, &bytes, want_dims)?;
    bytes.drain(..header);
    Ok(IdxArray { dims, data: bytes })
}

/// The dimensions of an IDX byte string and the length of its header, once both are checked.
fn check(path: &Path, bytes: &[u8], want_dims: usize) -> Result<(Vec<usize>, usize), DataError> {
    if bytes.len() < 4 {
        return err(path, format!("too short for an IDX header ({} bytes)", bytes.len()));
    }
    if bytes[0] != 0 || bytes[1] != 0 || bytes[2] != 0x08 || bytes[3] as usize != want_dims {
        return err(
            path,
            format!(
                "wrong magic number {:02x}{:02x}{:02x}{:02x}: expected 000008{want_dims:02x} (unsigned bytes, {want_dims} dimensions)",
                bytes[0], bytes[1], bytes[2], bytes[3]
            ),
        );
    }
    let header = 4 + 4 * want_dims;
    if bytes.len() < header {
        return err(path, format!("the file ends inside its header ({} of {header} bytes)", bytes.len()));
    }
    let dims: Vec<usize> = (0..want_dims)
        .map(|i| u32::from_be_bytes(bytes[4 + 4 * i..8 + 4 * i].try_into().expect("4 bytes")) as usize)
        .collect();
    let n: usize = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or(())
        .or_else(|_| err(path, "dimensions overflow"))?;
    let have = bytes.len() - header;
    if have != n {
        let what = if have < n { "short" } else { "too long" };
        return err(path, format!("file is {what}: dimensions {dims:?} need {n} bytes of data, found {have}"));
    }
    Ok((dims, header))
}

/// Reads a gzip-compressed IDX file.
pub fn read_gz(path: &Path, want_dims: usize) -> Result<IdxArray, DataError> {
    let mut file = std::fs::File::open(path).or_else(|e| err(path, format!("cannot open: {e}")))?;
    // Room for the whole file at once: grown by doubling, the 47 MB of training images were
    // copied and faulted in about twice over, a third of a run's start-up.
    let mut bytes = Vec::with_capacity(gzip_size_hint(&mut file).min(1 << 30));
    GzDecoder::new(file).read_to_end(&mut bytes).or_else(|e| err(path, format!("not a readable gzip file: {e}")))?;
    parse_owned(path, bytes, want_dims)
}

/// The uncompressed size a gzip file's trailer records (modulo 2^32, of its last member), 0 if
/// it cannot be read; the file is left at its start. Only a hint: a wrong one costs a copy.
fn gzip_size_hint(file: &mut std::fs::File) -> usize {
    use std::io::{Seek, SeekFrom};
    let mut trailer = [0u8; 4];
    let hint = match file.seek(SeekFrom::End(-4)).and_then(|_| file.read_exact(&mut trailer)) {
        Ok(()) => u32::from_le_bytes(trailer) as usize,
        Err(_) => 0,
    };
    match file.seek(SeekFrom::Start(0)) {
        Ok(_) => hint,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn idx(dims: &[u32], data: &[u8], magic: [u8; 4]) -> Vec<u8> {
        let mut v = magic.to_vec();
        for d in dims {
            v.extend(d.to_be_bytes());
        }
        v.extend(data);
        v
    }

    #[test]
    fn reads_a_well_formed_array() {
        let a = parse(Path::new("x"), &idx(&[2, 3], &[1, 2, 3, 4, 5, 6], [0, 0, 8, 2]), 2).unwrap();
        assert_eq!(a.dims, vec![2, 3]);
        assert_eq!(a.data, vec![1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn malformed_files_are_errors_that_say_why() {
        let p = Path::new("images.gz");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (idx(&[2, 3], &[0; 6], [0, 0, 8, 3]), "wrong magic number"),
            (idx(&[2, 3], &[0; 6], [1, 0, 8, 2]), "wrong magic number"),
            (idx(&[2, 3], &[0; 5], [0, 0, 8, 2]), "short"),
            (idx(&[2, 3], &[0; 7], [0, 0, 8, 2]), "too long"),
            (vec![0, 0], "too short"),
            (vec![0, 0, 8, 2, 0, 0, 0], "header"),
        ];
        for (bytes, want) in cases {
            let e = parse(p, &bytes, 2).unwrap_err();
            assert!(e.to_string().contains(want) && e.to_string().starts_with("images.gz"), "{e}");
        }
    }

    #[test]
    fn a_gzip_file_reads_back_its_array_whatever_its_trailer_says() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("dsgd-idx-ok-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let raw = idx(&[3, 2, 2], &(0..12).collect::<Vec<u8>>(), [0, 0, 8, 3]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&raw).unwrap();
        let gz = gz.finish().unwrap();
        let f = dir.join("ok.gz");
        std::fs::write(&f, &gz).unwrap();
        let want = parse(&f, &raw, 3).unwrap();
        assert_eq!(read_gz(&f, 3).unwrap(), want);
        assert_eq!(gzip_size_hint(&mut std::fs::File::open(&f).unwrap()), raw.len());
        // A trailer whose size is wrong is only a wrong hint: the decoder checks it, as before.
        let mut lying = gz.clone();
        let n = lying.len();
        lying[n - 4..].copy_from_slice(&7u32.to_le_bytes());
        std::fs::write(&f, &lying).unwrap();
        assert!(read_gz(&f, 3).unwrap_err().to_string().contains("gzip"));
        // Too short for a trailer: no hint, and the decoder's error.
        std::fs::write(&f, b"\x1f\x8b").unwrap();
        assert_eq!(gzip_size_hint(&mut std::fs::File::open(&f).unwrap()), 0);
        assert!(read_gz(&f, 3).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_corrupted_gzip_file_is_an_error() {
        let dir = std::env::temp_dir().join(format!("dsgd-idx-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("bad.gz");
        std::fs::write(&f, b"\x1f\x8b\x08\x00garbage").unwrap();
        assert!(read_gz(&f, 1).unwrap_err().to_string().contains("gzip"));
        assert!(read_gz(&dir.join("missing.gz"), 1).unwrap_err().to_string().contains("cannot open"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
