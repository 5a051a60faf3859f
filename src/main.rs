//! The `ksched` command: operator, scheduler, and the offline tools around them, with the in-tree
//! plugins.

use std::process::ExitCode;

ksched::use_selectable_allocator!();

fn main() -> ExitCode {
    ksched::cli::main(ksched::framework::registry::Registry::in_tree())
}
