pub mod allocator;
pub mod cel;
#[cfg(test)]
pub mod testing;
