#[ring_rt_macros::test]
async fn takes_an_argument(n: u32) {}

#[ring_rt_macros::test]
async fn generic<T: Default>() {}

fn main() {}
