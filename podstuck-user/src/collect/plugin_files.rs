//! The node's CNI plugin files as the exec program knows them: the
//! `PLUGIN_FILES` table (by device and inode) and `PLUGIN_INODES`, the
//! bits the program tests first so that an exec of anything else costs no
//! hash lookup. Kept in step here, so the two never disagree for longer
//! than one update.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use aya::maps::{Array, HashMap as BpfHashMap, MapData};
use aya::Ebpf;
use podstuck_common::lifecycle::{plugin_inode_bit, PLUGIN_INODE_WORDS};
use podstuck_common::PluginFile;

/// The exec program's two maps of plugin files, and what `PLUGIN_FILES` holds.
pub struct KernelPluginFiles {
    files: BpfHashMap<MapData, PluginFile, u8>,
    inodes: Array<MapData, u64>,
    known: BTreeSet<PluginFile>,
}

impl KernelPluginFiles {
    /// Takes both maps from the loaded object.
    pub fn take(ebpf: &mut Ebpf) -> Result<KernelPluginFiles> {
        Ok(KernelPluginFiles {
            files: BpfHashMap::try_from(ebpf.take_map("PLUGIN_FILES").context("PLUGIN_FILES map missing")?)?,
            inodes: Array::try_from(ebpf.take_map("PLUGIN_INODES").context("PLUGIN_INODES map missing")?)?,
            known: BTreeSet::new(),
        })
    }

    /// Makes the kernel's plugin files `wanted`: those gone removed, then
    /// those new added, then the bits set for what the table holds. A file
    /// new is streamed from its bit on; a file gone stops at once, its
    /// stale bit cleared right after. Returns the files left out (the
    /// table full).
    pub fn set(&mut self, wanted: BTreeSet<PluginFile>) -> Result<usize> {
        for gone in self.known.difference(&wanted) {
            let _ = self.files.remove(gone);
        }
        self.known.retain(|f| wanted.contains(f));
        let mut left_out = 0;
        for new in wanted.difference(&self.known).copied().collect::<Vec<_>>() {
            match self.files.insert(new, 1u8, 0) {
                Ok(()) => {
                    self.known.insert(new);
                }
                Err(_) => left_out += 1,
            }
        }
        // Every word, whether it changed or not: this runs at start and when
        // a plugin directory changes, and a word rewritten as it was is harmless.
        for (index, word) in inode_words(&self.known).into_iter().enumerate() {
            self.inodes.set(index as u32, word, 0).context("writing the exec program's PLUGIN_INODES")?;
        }
        Ok(left_out)
    }
}

/// `PLUGIN_INODES` for `files`: each file's bit set.
fn inode_words(files: &BTreeSet<PluginFile>) -> Vec<u64> {
    let mut words = vec![0u64; PLUGIN_INODE_WORDS as usize];
    for file in files {
        let (word, bit) = plugin_inode_bit(file.ino);
        words[word as usize] |= bit;
    }
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(ino: u64) -> PluginFile {
        PluginFile { ino, dev: 0x803, _pad: 0 }
    }

    #[test]
    fn each_files_bit_is_set_and_no_other() {
        let files: BTreeSet<PluginFile> = [file(0), file(63), file(64), file(4096 + 65)].into();
        let words = inode_words(&files);
        assert_eq!(words[0], 1 | 1 << 63);
        // 64 and 4096 + 65 fall in word 1: bits 0 and 1.
        assert_eq!(words[1], 0b11);
        assert!(words[2..].iter().all(|&w| w == 0));
        assert_eq!(words.iter().map(|w| w.count_ones()).sum::<u32>(), 4);
    }

    #[test]
    fn every_inode_number_has_a_bit_inside_the_map() {
        for ino in [0, 1, 4095, 4096, u64::MAX, 1 << 40] {
            let (word, bit) = plugin_inode_bit(ino);
            assert!(word < PLUGIN_INODE_WORDS, "{ino}");
            assert_eq!(bit.count_ones(), 1, "{ino}");
        }
    }
}
