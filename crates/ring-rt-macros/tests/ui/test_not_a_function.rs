#[ring_rt_macros::test]
struct NotAFunction;

fn main() {}
