#[ring_rt_macros::main(multi_thread)]
async fn main() {}
