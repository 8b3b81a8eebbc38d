//! A model check of the entry protocol: loom runs each scenario under every interleaving of
//! its threads' atomic operations (up to a bound on preemptions) and checks that no update is
//! lost or lands in another key's entry. Run by `.ci/run`:
//! `RUSTFLAGS="--cfg brownout_loom" cargo test --lib store::table::model`.

use super::*;
use loom::sync::Arc;
use loom::thread;

fn add<const S: usize>(table: &KeyTable<S>, key: u64, n: u64) {
    table
        .update(key, |_| None, |v| Update::Write(v + n, ()))
        .expect("an entry");
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    // A growth's setup and its moves are long paths of atomic operations.
    b.max_branches = 100_000;
    b.check(f);
}

#[test]
fn two_threads_adding_to_a_new_key_lose_nothing() {
    model(|| {
        let t = Arc::new(KeyTable::<1>::new(16));
        let other = t.clone();
        let h = thread::spawn(move || add(&other, 7, 1));
        add(&t, 7, 1);
        h.join().unwrap();
        // A rare duplicate claim may hold the two adds in two entries; none is lost.
        assert_eq!(t.values_of(7).iter().sum::<u64>(), 2);
    });
}

#[test]
fn a_sweep_racing_an_update_loses_nothing() {
    model(|| {
        let t = Arc::new(KeyTable::<1>::new(16));
        add(&t, 7, 0);
        let other = t.clone();
        let h = thread::spawn(move || {
            other.sweep(|v| v == 0);
        });
        add(&t, 7, 1);
        h.join().unwrap();
        assert_eq!(t.values_of(7), [1]);
    });
}

#[test]
fn the_last_release_racing_an_acquire_keeps_the_count() {
    model(|| {
        let t = Arc::new(KeyTable::<1>::new(16));
        add(&t, 7, 1);
        let other = t.clone();
        let h = thread::spawn(move || {
            other.update(
                7,
                |_| None,
                |c| {
                    if c <= 1 {
                        Update::Remove(())
                    } else {
                        Update::Write(c - 1, ())
                    }
                },
            );
        });
        add(&t, 7, 1);
        h.join().unwrap();
        assert_eq!(t.values_of(7).iter().sum::<u64>(), 1);
    });
}

#[test]
fn an_update_never_lands_in_an_entry_given_to_another_key() {
    // The guard against this race is the 16-bit tag of the key in the state word, so the
    // two keys have different tags, as two hashes do but for 1 in 65,536. (With equal tags,
    // this model finds the interleaving where the stale update lands in the new owner's
    // entry: see the module docs.)
    let (seven, nine) = (7 | 2 << 48, 9 | 5 << 48);
    model(move || {
        let t = Arc::new(KeyTable::<1>::new(16));
        add(&t, seven, 0);
        let other = t.clone();
        let h = thread::spawn(move || {
            // Evict `seven` whatever its value, then take an entry for `nine`.
            other.sweep(|_| true);
            add(&other, nine, 5);
        });
        add(&t, seven, 1);
        h.join().unwrap();
        assert_eq!(t.values_of(nine), [5]);
        let left = t.values_of(seven);
        assert!(left.is_empty() || left == [1], "{left:?}");
    });
}

#[test]
fn a_move_racing_updates_loses_nothing_and_completes() {
    // Four rows, two in use: the ninth key grows the prefix to four. `moving` sits in
    // row 0 or 1 and belongs in 2 or 3 under the new mask; the fillers stay where they are.
    let moving = 2 | 3 << 32 | 9 << 48;
    let fillers: Vec<u64> = (1..=8u64)
        .map(|i| i * 4 | 1 << 32 | (10 + i) << 48)
        .collect();
    model(move || {
        let t = Arc::new(KeyTable::<1>::with_initial(32, 2));
        add(&t, moving, 5);
        for &f in &fillers {
            add(&t, f, 1);
        }
        assert_eq!(t.masks(), (3, 1), "the growth began");
        let other = t.clone();
        let filler = fillers[0];
        let h = thread::spawn(move || add(&other, filler, 1));
        add(&t, moving, 1);
        h.join().unwrap();
        assert_eq!(t.values_of(moving), [6]);
        assert_eq!(t.values_of(filler), [2]);
        assert_eq!(
            t.masks(),
            (3, 3),
            "both old rows moved: one place to search again"
        );
        assert_eq!(t.peek(moving), Some(6));
    });
}

/// A wide value whose top bits repeat its low ones: a read of one write's low bits beside
/// another's top bits shows.
fn whole(n: u64) -> u64 {
    (n << 48) | n
}

#[test]
fn wide_writes_racing_a_read_and_a_move_are_never_mixed() {
    // As in the move model: `moving` belongs elsewhere once the ninth key grows the prefix.
    let moving = 2 | 3 << 32 | 9 << 48;
    let fillers: Vec<u64> = (1..=8u64)
        .map(|i| i * 4 | 1 << 32 | (10 + i) << 48)
        .collect();
    model(move || {
        let t = Arc::new(WideTable::with_initial(32, 2));
        t.update(moving, |_| None, |_| Update::Write(whole(1), ()));
        for &f in &fillers {
            add(&t, f, 1);
        }
        let other = t.clone();
        let h = thread::spawn(move || {
            // Reads (and helps move) while the other thread writes: a value whole, or its low
            // bits alone when the mark read is not the state word's (a writer between its two
            // stores, or a mark newer than the word read).
            other.update(
                moving,
                |_| None,
                |v| {
                    assert!([whole(1), whole(2), 1, 2].contains(&v), "mixed: {v:#x}");
                    Update::Keep(())
                },
            );
        });
        t.update(
            moving,
            |_| None,
            |v| {
                assert_eq!(v, whole(1));
                Update::Write(whole(2), ())
            },
        );
        h.join().unwrap();
        // The low bits are the write's; the top ones too, unless a move took the value
        // between the write's two stores (advisory bits, lost then, never mixed).
        let left = t.values_of(moving);
        assert!(left == [whole(2)] || left == [2], "{left:x?}");
        assert_eq!(t.peek(moving), left.first().copied());
    });
}

impl<const S: usize> KeyTable<S> {
    /// Every value stored for `key`, in any entry (a duplicate claim shows as two).
    fn values_of(&self, key: u64) -> Vec<u64> {
        let key = stored(key);
        self.rows
            .iter()
            .flat_map(Row::entries)
            .filter(|s| s.key.load(Ordering::Acquire) == key)
            .filter_map(|s| {
                let w = s.word.load(Ordering::Acquire);
                (w != BUSY && w >> 48 == tag(key)).then(|| s.value(w))
            })
            .collect()
    }
}
