#[ring_rt_macros::test]
#[test]
async fn already_a_test() {}

fn main() {}
