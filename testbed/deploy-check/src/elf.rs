//! Whether an executable needs a dynamic loader: an ELF file with a `PT_INTERP` program header
//! names the loader (`/lib64/ld-linux-x86-64.so.2`) the kernel must start first, which a
//! `scratch` image does not have. A static (or static-pie) executable has none.

/// Why a file could not be read as a 64-bit little-endian ELF file.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// Not an ELF file, or not ELF64 little-endian.
    #[error("not a 64-bit little-endian ELF file")]
    NotElf64,
    /// The program header table lies outside the file.
    #[error("the program header table is truncated")]
    Truncated,
}

const PT_INTERP: u32 = 3;

fn read<const N: usize>(bytes: &[u8], at: usize) -> Result<[u8; N], Error> {
    bytes
        .get(at..at + N)
        .and_then(|s| s.try_into().ok())
        .ok_or(Error::Truncated)
}

/// Whether the ELF64 file in `bytes` has a `PT_INTERP` program header.
///
/// # Errors
/// See [`Error`].
pub fn needs_loader(bytes: &[u8]) -> Result<bool, Error> {
    // e_ident: magic, EI_CLASS = 2 (64-bit), EI_DATA = 1 (little-endian).
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01") {
        return Err(Error::NotElf64);
    }
    let phoff =
        usize::try_from(u64::from_le_bytes(read(bytes, 0x20)?)).map_err(|_| Error::Truncated)?;
    let phentsize = usize::from(u16::from_le_bytes(read(bytes, 0x36)?));
    let phnum = usize::from(u16::from_le_bytes(read(bytes, 0x38)?));
    for i in 0..phnum {
        let p_type = u32::from_le_bytes(read(bytes, phoff + i * phentsize)?);
        if p_type == PT_INTERP {
            return Ok(true);
        }
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ELF64 header with one program header of type `p_type`.
    fn elf_with(p_type: u32) -> Vec<u8> {
        let mut bytes = vec![0_u8; 0x40 + 0x38];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[0x20..0x28].copy_from_slice(&0x40_u64.to_le_bytes());
        bytes[0x36..0x38].copy_from_slice(&0x38_u16.to_le_bytes());
        bytes[0x38..0x3a].copy_from_slice(&1_u16.to_le_bytes());
        bytes[0x40..0x44].copy_from_slice(&p_type.to_le_bytes());
        bytes
    }

    #[test]
    fn an_interp_header_means_a_dynamic_loader() {
        assert_eq!(needs_loader(&elf_with(PT_INTERP)), Ok(true));
        assert_eq!(needs_loader(&elf_with(1)), Ok(false));
        assert_eq!(needs_loader(b"#!/bin/sh\n"), Err(Error::NotElf64));
        assert_eq!(needs_loader(&elf_with(1)[..0x42]), Err(Error::Truncated));
    }

    #[test]
    fn the_test_binary_itself_is_dynamic() {
        // Test binaries are linked like the workspace's default build: with the loader.
        let me = std::fs::read(std::env::current_exe().expect("the test binary's path"))
            .expect("the test binary is readable");
        assert_eq!(needs_loader(&me), Ok(true));
    }
}
