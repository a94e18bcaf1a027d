//! A command's process tree, found through `/proc`: is a process the command or one of its
//! descendants (data-loader workers, `torchrun` ranks)?

use std::collections::HashMap;

/// Answers "is `pid` in the tree rooted at `root`?", remembering each answer.
#[derive(Debug)]
pub(crate) struct ProcessTree {
    root: u32,
    known: HashMap<u32, bool>,
}

impl ProcessTree {
    pub(crate) fn new(root: u32) -> Self {
        Self {
            root,
            known: HashMap::new(),
        }
    }

    /// The command's own process id.
    pub(crate) fn root(&self) -> u32 {
        self.root
    }

    /// Walks parent links from `pid` up to the root or to `init`. Only the processes the
    /// driver lists are asked about, so this reads a few small files per new process.
    pub(crate) fn contains(&mut self, pid: u32) -> bool {
        if let Some(&known) = self.known.get(&pid) {
            return known;
        }
        let mut chain = Vec::new();
        let mut current = pid;
        let found = loop {
            if current == self.root {
                break true;
            }
            if let Some(&known) = self.known.get(&current) {
                break known;
            }
            if current <= 1 || chain.len() > 256 {
                break false;
            }
            chain.push(current);
            match parent_of(current) {
                Some(parent) => current = parent,
                None => break false,
            }
        };
        for pid in chain {
            self.known.insert(pid, found);
        }
        self.known.insert(pid, found);
        found
    }
}

/// The parent process id, from `/proc/<pid>/stat` (field 4, after the parenthesised name,
/// which may itself hold spaces and parentheses).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_is_in_its_parents_tree_and_not_in_an_unrelated_one() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id();
        assert!(ProcessTree::new(me).contains(child.id()));
        assert!(ProcessTree::new(child.id()).contains(child.id()));
        assert!(!ProcessTree::new(child.id()).contains(me));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
