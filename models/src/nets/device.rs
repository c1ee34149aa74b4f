//! Where a network computes: the `flex` CPU backend (the default, bitwise reproducible) or, with
//! the cargo feature `cuda`, an NVIDIA GPU through burn-cuda. burn panics when CUDA is missing;
//! [`Device::check`] turns that into an error before the first real use.

use std::fmt;

/// A device that cannot be named or used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    /// Not `cpu`, `cuda` or `cuda:N`.
    #[error("unknown device {0:?}; expected \"cpu\", \"cuda\" or \"cuda:N\"")]
    Unknown(String),
    /// This binary was built without the `cuda` feature.
    #[error(
        "this dsgd was built without CUDA support; rebuild with `cargo build --release --features cuda` \
         (on a machine with an NVIDIA driver) or use device \"cpu\""
    )]
    NotBuilt,
    /// No NVIDIA driver library where the loader looks.
    #[error(
        "no NVIDIA driver found: libcuda.so.1 is not in LD_LIBRARY_PATH or the system library folders; this \
         machine has no usable GPU. Install the NVIDIA driver or use device \"cpu\""
    )]
    NoDriver,
    /// The driver is there but the GPU could not compute a first sum.
    #[error("CUDA device {device} cannot be used: {why}; use device \"cpu\"")]
    Unusable {
        /// The GPU's number.
        device: usize,
        /// What burn or the driver said.
        why: String,
    },
}

/// A compute device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// burn's `flex` CPU backend.
    Cpu,
    /// CUDA GPU number `n` (needs the `cuda` feature and an NVIDIA driver).
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Cpu => write!(f, "cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl Device {
    /// Parses `cpu`, `cuda` or `cuda:N`.
    pub fn parse(s: &str) -> Result<Self, DeviceError> {
        match s {
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| DeviceError::Unknown(s.to_string())),
        }
    }

    /// Checks that the device can be used: always for the CPU; for CUDA, that this binary was
    /// built with the `cuda` feature, that the driver library `libcuda` can be found and that a
    /// first tensor can be made on the GPU.
    pub fn check(&self) -> Result<(), DeviceError> {
        match *self {
            Device::Cpu => Ok(()),
            Device::Cuda(n) => cuda_check(n),
        }
    }
}

/// The folders the dynamic loader searches for `libcuda.so.1`, as far as they can be listed.
fn library_dirs() -> Vec<std::path::PathBuf> {
    let mut dirs: Vec<std::path::PathBuf> = std::env::var("LD_LIBRARY_PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|s| !s.is_empty())
        .map(Into::into)
        .collect();
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib/x86_64-linux-gnu",
        "/usr/local/cuda/lib64",
        "/usr/lib/wsl/lib",
    ] {
        dirs.push(d.into());
    }
    if let Ok(conf) = std::fs::read_dir("/etc/ld.so.conf.d") {
        for f in conf.flatten() {
            if let Ok(text) = std::fs::read_to_string(f.path()) {
                dirs.extend(text.lines().map(str::trim).filter(|l| l.starts_with('/')).map(Into::into));
            }
        }
    }
    dirs
}

/// True if a CUDA driver library is present where the loader looks.
pub fn driver_present() -> bool {
    library_dirs().iter().any(|d| d.join("libcuda.so.1").exists() || d.join("libcuda.so").exists())
}

#[cfg(not(feature = "cuda"))]
fn cuda_check(_n: usize) -> Result<(), DeviceError> {
    Err(DeviceError::NotBuilt)
}

#[cfg(feature = "cuda")]
fn cuda_check(n: usize) -> Result<(), DeviceError> {
    use burn::backend::cuda::CudaDevice;
    use burn::backend::Cuda;
    use burn::tensor::Tensor;
    if !driver_present() {
        return Err(DeviceError::NoDriver);
    }
    // burn panics (inside cudarc or cubecl) when the driver cannot start or the GPU is absent:
    // probe once with the panic message silenced and report it as an error.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let probe = std::panic::catch_unwind(|| {
        let t = Tensor::<Cuda, 1>::from_floats([1.0, 2.0], &CudaDevice::new(n));
        t.sum().into_scalar()
    });
    std::panic::set_hook(hook);
    match probe {
        Ok(s) if s == 3.0 => Ok(()),
        Ok(s) => Err(DeviceError::Unusable { device: n, why: format!("it computed 1 + 2 = {s}") }),
        Err(p) => {
            let why = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown error".into());
            Err(DeviceError::Unusable { device: n, why })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print() {
        assert_eq!(Device::parse("cpu"), Ok(Device::Cpu));
        assert_eq!(Device::parse("cuda"), Ok(Device::Cuda(0)));
        assert_eq!(Device::parse("cuda:3"), Ok(Device::Cuda(3)));
        assert_eq!(Device::parse("gpu"), Err(DeviceError::Unknown("gpu".into())));
        assert!(Device::parse("cuda:x").unwrap_err().to_string().contains("expected"));
        assert_eq!(Device::Cuda(2).to_string(), "cuda:2");
        assert_eq!(Device::Cpu.check(), Ok(()));
    }

    #[test]
    fn cuda_without_a_gpu_is_a_clear_error() {
        // On a machine with a working GPU and the `cuda` feature this would succeed.
        if cfg!(feature = "cuda") && driver_present() {
            return;
        }
        let e = Device::Cuda(0).check().unwrap_err();
        if !cfg!(feature = "cuda") {
            assert_eq!(e, DeviceError::NotBuilt);
        }
        let e = e.to_string();
        assert!(e.contains("cuda") || e.contains("CUDA") || e.contains("NVIDIA"), "{e}");
        assert!(e.contains("\"cpu\""), "the error says what to do instead: {e}");
    }
}
