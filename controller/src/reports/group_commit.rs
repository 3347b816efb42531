//! Group commit of one application's reports: callers that each need their item written take turns, and
//! whoever takes the turn writes every item waiting, so at a high rate of ends one status write records
//! many. A caller is answered as soon as the write that took its item ends, not when its own turn comes:
//! turns are first come, first served, so a caller whose item an earlier turn already wrote could
//! otherwise wait behind every later write, and the agent, which keeps a bounded number of reports
//! unanswered, would stop sending.

use std::future::Future;
use std::sync::{Mutex, PoisonError};

use tokio::sync::oneshot;

/// Items waiting for the next write, and the turn to write them.
pub(crate) struct GroupCommit<T, O> {
    waiting: Mutex<Vec<(T, oneshot::Sender<O>)>>,
    turn: tokio::sync::Mutex<()>,
}

impl<T, O> Default for GroupCommit<T, O> {
    fn default() -> Self {
        Self {
            waiting: Mutex::new(Vec::new()),
            turn: tokio::sync::Mutex::new(()),
        }
    }
}

impl<T, O> GroupCommit<T, O> {
    /// Queues `item` and returns its answer from the write that took it: this caller's `write` (given
    /// every item waiting, answering each in order) when it gets the turn first, another caller's
    /// otherwise. `None` when the write that took it was dropped or answered fewer items than it took.
    pub(crate) async fn submit<W, F>(&self, item: T, write: W) -> Option<O>
    where
        W: FnOnce(Vec<T>) -> F,
        F: Future<Output = Vec<O>>,
    {
        let (sender, mut answer) = oneshot::channel();
        self.lock_waiting().push((item, sender));
        tokio::select! {
            // An answer beats a turn: a turn taken after another caller wrote this item would write
            // nothing for it, only delay it.
            biased;
            answer = &mut answer => return answer.ok(),
            turn = self.turn.lock() => {
                let batch = std::mem::take(&mut *self.lock_waiting());
                if !batch.is_empty() {
                    let (items, senders): (Vec<T>, Vec<_>) = batch.into_iter().unzip();
                    for (sender, outcome) in senders.into_iter().zip(write(items).await) {
                        let _ = sender.send(outcome);
                    }
                }
                drop(turn);
            }
        }
        // This item was in the batch just written, or an earlier turn took it and answered before
        // giving the turn up.
        answer.await.ok()
    }

    fn lock_waiting(&self) -> std::sync::MutexGuard<'_, Vec<(T, oneshot::Sender<O>)>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::sync::{Semaphore, mpsc};

    use super::*;

    /// A write that reports the batch it took, then waits for the test to let it finish.
    struct Gate {
        batches: mpsc::UnboundedSender<Vec<u32>>,
        open: Arc<Semaphore>,
    }

    impl Gate {
        fn write(&self) -> impl FnOnce(Vec<u32>) -> std::pin::Pin<Box<dyn Future<Output = Vec<u32>> + Send>> {
            let (batches, open) = (self.batches.clone(), self.open.clone());
            move |items| {
                Box::pin(async move {
                    let _ = batches.send(items.clone());
                    if let Ok(permit) = open.acquire().await {
                        permit.forget();
                    }
                    items.iter().map(|i| i * 10).collect()
                })
            }
        }
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn a_caller_is_answered_by_the_write_that_took_its_item_not_by_its_own_turn() {
        let commit = Arc::new(GroupCommit::<u32, u32>::default());
        let (batches_tx, mut batches) = mpsc::unbounded_channel();
        let gate = Arc::new(Gate {
            batches: batches_tx,
            open: Arc::new(Semaphore::new(0)),
        });
        let submit = |item: u32| {
            let (commit, gate) = (commit.clone(), gate.clone());
            tokio::spawn(async move { commit.submit(item, gate.write()).await })
        };

        // 1 takes the turn; 2 and 3 wait for it.
        let one = submit(1);
        assert_eq!(batches.recv().await, Some(vec![1]));
        let two = submit(2);
        settle().await;
        let three = submit(3);
        settle().await;
        gate.open.add_permits(1);
        assert_eq!(one.await.ok().flatten(), Some(10));
        // 2's turn writes 2 and 3 together; 4 comes while it writes and waits behind 3 for a turn.
        assert_eq!(batches.recv().await, Some(vec![2, 3]));
        let four = submit(4);
        settle().await;
        gate.open.add_permits(1);
        assert_eq!(two.await.ok().flatten(), Some(20));
        // 3 was written by 2's turn: answered now, while the write of 4 (3's turn, before this module
        // answered callers first) has not ended.
        let three = tokio::time::timeout(Duration::from_secs(5), three).await;
        assert_eq!(three.ok().and_then(Result::ok).flatten(), Some(30));
        assert_eq!(batches.recv().await, Some(vec![4]));
        assert!(!four.is_finished());
        gate.open.add_permits(1);
        assert_eq!(four.await.ok().flatten(), Some(40));
    }

    #[tokio::test]
    async fn a_write_that_answers_fewer_items_than_it_took_answers_the_rest_none() {
        let commit = GroupCommit::<u32, u32>::default();
        let answer = commit.submit(7, |_| async { Vec::new() }).await;
        assert_eq!(answer, None);
    }
}
