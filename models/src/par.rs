//! Work spread over threads with results in the order of the work, so that what is summed
//! from them has the same bits on any number of threads.

/// `items` mapped by `f`, in order, the list cut into `threads` runs mapped side by side (one
/// on the calling thread).
pub fn by_item<T: Send, U: Send>(items: Vec<T>, threads: usize, f: impl Fn(T) -> U + Sync) -> Vec<U> {
    if threads < 2 || items.len() < 2 {
        return items.into_iter().map(f).collect();
    }
    let per = items.len().div_ceil(threads);
    let mut runs: Vec<Vec<T>> = Vec::new();
    let mut rest = items.into_iter().peekable();
    while rest.peek().is_some() {
        runs.push(rest.by_ref().take(per).collect());
    }
    let f = &f;
    std::thread::scope(|s| {
        let mut first = runs.into_iter();
        let mine = first.next().unwrap_or_default();
        let others: Vec<_> = first.map(|run| s.spawn(move || run.into_iter().map(f).collect::<Vec<U>>())).collect();
        let mut out: Vec<U> = mine.into_iter().map(f).collect();
        for h in others {
            out.extend(h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        out
    })
}
