//! The active queue's heap (upstream's `heap.Heap`): ordered by the profile's QueueSort, with
//! lookup and removal by key.

use std::collections::HashMap;

use super::LessFn;
use crate::framework::types::QueuedPodInfo;

/// A binary heap ordered by a runtime comparator, with lookup and removal by key.
pub(super) struct ActiveHeap {
    pub(super) less: LessFn,
    items: Vec<(String, QueuedPodInfo)>,
    index: HashMap<String, usize>,
}

impl ActiveHeap {
    pub(super) fn new(less: LessFn) -> Self {
        Self {
            less,
            items: Vec::new(),
            index: HashMap::new(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }

    pub(super) fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    pub(super) fn get_mut(&mut self, key: &str) -> Option<&mut QueuedPodInfo> {
        let i = *self.index.get(key)?;
        Some(&mut self.items[i].1)
    }

    pub(super) fn push(&mut self, key: String, qpi: QueuedPodInfo) {
        if let Some(&i) = self.index.get(&key) {
            self.items[i].1 = qpi;
            self.fix_at(i);
            return;
        }
        self.index.insert(key.clone(), self.items.len());
        self.items.push((key, qpi));
        self.sift_up(self.items.len() - 1);
    }

    pub(super) fn pop(&mut self) -> Option<(String, QueuedPodInfo)> {
        if self.items.is_empty() {
            return None;
        }
        let last = self.items.len() - 1;
        self.swap(0, last);
        let (key, qpi) = self.items.pop()?;
        self.index.remove(&key);
        if !self.items.is_empty() {
            self.sift_down(0);
        }
        Some((key, qpi))
    }

    pub(super) fn remove(&mut self, key: &str) -> Option<QueuedPodInfo> {
        let i = self.index.remove(key)?;
        let last = self.items.len() - 1;
        if i != last {
            self.items.swap(i, last);
            let moved = self.items[i].0.clone();
            self.index.insert(moved, i);
        }
        let (_, qpi) = self.items.pop()?;
        if i < self.items.len() {
            self.fix_at(i);
        }
        Some(qpi)
    }

    pub(super) fn fix(&mut self, key: &str) {
        if let Some(&i) = self.index.get(key) {
            self.fix_at(i);
        }
    }

    fn fix_at(&mut self, i: usize) {
        let i = self.sift_up(i);
        self.sift_down(i);
    }

    fn before(&self, a: usize, b: usize) -> bool {
        (self.less)(&self.items[a].1, &self.items[b].1)
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.items.swap(a, b);
        self.index.insert(self.items[a].0.clone(), a);
        self.index.insert(self.items[b].0.clone(), b);
    }

    fn sift_up(&mut self, mut i: usize) -> usize {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.before(i, parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
        i
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut best = i;
            if l < self.items.len() && self.before(l, best) {
                best = l;
            }
            if r < self.items.len() && self.before(r, best) {
                best = r;
            }
            if best == i {
                return;
            }
            self.swap(i, best);
            i = best;
        }
    }
}
