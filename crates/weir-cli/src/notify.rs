//! TEMPORARY stub until the helper's notify module lands.
pub fn ready(_status: &str) {}
pub fn reloading() {}
pub fn stopping() {}
