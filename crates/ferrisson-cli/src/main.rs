//! The `ferrisson` command.

fn main() {}
