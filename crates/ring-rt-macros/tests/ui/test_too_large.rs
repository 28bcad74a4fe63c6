#[ring_rt_macros::test(entries = 5000000000)]
async fn entries_beyond_u32() {}

fn main() {}
