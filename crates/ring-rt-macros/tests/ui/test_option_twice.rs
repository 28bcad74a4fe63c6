#[ring_rt_macros::test(workers = 2, threads = 2, backend = "epoll", backend = "uring")]
async fn twice() {}

fn main() {}
