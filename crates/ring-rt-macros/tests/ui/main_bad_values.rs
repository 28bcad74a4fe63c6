#[ring_rt_macros::main(workers = 0, backend = "kqueue", entries = "many")]
async fn main() {}
