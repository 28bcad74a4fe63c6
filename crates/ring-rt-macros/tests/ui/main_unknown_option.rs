#[ring_rt_macros::main(workerz = 2, flavor = "multi_thread")]
async fn main() {}
