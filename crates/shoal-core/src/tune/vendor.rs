//! The CPU vendor a tuning row was measured on (`vendor=`): with the CPU
//! count, a row's machine class. One hypervisor gave the 2-vCPU dev VM an
//! Intel host one day and an AMD host the next, and rows measured on one
//! made allreduces of 64 KiB-1 MiB 1.4-2.2x slower than shoal's fastest on
//! the other (docs/benchmarks.md), which `cpus=` alone cannot tell apart.

use std::fmt;

/// Who made the CPU this process runs on. The discriminant is the vendor's
/// code in the ranks' agreement record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CpuVendor {
    Intel = 0,
    Amd = 1,
    Arm = 2,
    /// Any other x86 vendor, or a CPU whose vendor cannot be read.
    Other = 3,
}

impl CpuVendor {
    /// Every vendor, in the order of their codes.
    pub const ALL: [CpuVendor; 4] = [
        CpuVendor::Intel,
        CpuVendor::Amd,
        CpuVendor::Arm,
        CpuVendor::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CpuVendor::Intel => "intel",
            CpuVendor::Amd => "amd",
            CpuVendor::Arm => "arm",
            CpuVendor::Other => "other",
        }
    }

    /// The vendor a row names, `None` for an unknown one.
    pub fn parse(text: &str) -> Option<CpuVendor> {
        CpuVendor::ALL.into_iter().find(|v| v.name() == text)
    }

    /// A small number for the ranks' agreement record.
    pub fn code(self) -> u64 {
        self as u64
    }

    /// The vendor of `code`, `Other` for a code this build does not know.
    pub fn from_code(code: u64) -> CpuVendor {
        CpuVendor::ALL
            .get(code as usize)
            .copied()
            .unwrap_or(CpuVendor::Other)
    }

    /// The vendor of the x86 CPUID vendor string (`GenuineIntel`).
    fn of_cpuid(id: &[u8; 12]) -> CpuVendor {
        match id {
            b"GenuineIntel" => CpuVendor::Intel,
            b"AuthenticAMD" => CpuVendor::Amd,
            _ => CpuVendor::Other,
        }
    }
}

impl fmt::Display for CpuVendor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The vendor of the CPU this process runs on.
#[cfg(target_arch = "x86_64")]
pub fn local_vendor() -> CpuVendor {
    // Leaf 0 of CPUID exists on every x86-64 CPU; the vendor string is its
    // EBX, EDX, ECX, in that order.
    #[allow(unused_unsafe)]
    let leaf = unsafe { std::arch::x86_64::__cpuid(0) };
    let mut id = [0u8; 12];
    id[..4].copy_from_slice(&leaf.ebx.to_le_bytes());
    id[4..8].copy_from_slice(&leaf.edx.to_le_bytes());
    id[8..].copy_from_slice(&leaf.ecx.to_le_bytes());
    CpuVendor::of_cpuid(&id)
}

/// The vendor of the CPU this process runs on.
#[cfg(target_arch = "aarch64")]
pub fn local_vendor() -> CpuVendor {
    CpuVendor::Arm
}

/// The vendor of the CPU this process runs on.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn local_vendor() -> CpuVendor {
    CpuVendor::Other
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuid_vendor_strings_name_their_vendor() {
        assert_eq!(CpuVendor::of_cpuid(b"GenuineIntel"), CpuVendor::Intel);
        assert_eq!(CpuVendor::of_cpuid(b"AuthenticAMD"), CpuVendor::Amd);
        assert_eq!(CpuVendor::of_cpuid(b"HygonGenuine"), CpuVendor::Other);
    }

    #[test]
    fn names_and_codes_round_trip() {
        for v in CpuVendor::ALL {
            assert_eq!(CpuVendor::parse(v.name()), Some(v));
            assert_eq!(CpuVendor::from_code(v.code()), v);
        }
        assert_eq!(CpuVendor::parse("Intel"), None);
        assert_eq!(CpuVendor::from_code(99), CpuVendor::Other);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn this_machine_s_vendor_is_the_one_proc_cpuinfo_names() {
        let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
            return;
        };
        let named = info
            .lines()
            .find_map(|l| l.strip_prefix("vendor_id"))
            .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim());
        let expected = match named {
            Some("GenuineIntel") => CpuVendor::Intel,
            Some("AuthenticAMD") => CpuVendor::Amd,
            _ => CpuVendor::Other,
        };
        assert_eq!(local_vendor(), expected);
    }
}
