#[ring_rt_macros::main]
fn main() {}
