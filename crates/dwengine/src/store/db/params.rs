//! Parameters of a statement: the forms the store passes (`params![…]`,
//! `[a, b]`, `[]`, [`params_from_iter`]) flattened into one slice of
//! values each backend binds.
//!
//! The value model is SQLite's: a parameter is anything that converts to
//! one of SQLite's five storage classes (rusqlite's `ToSql`), and a column
//! is read back through rusqlite's `FromSql` from one of them. A backend
//! that is not SQLite maps its own types onto those classes, so the store
//! converts values one way on every backend.

pub use rusqlite::types::{FromSql, FromSqlError, ToSql, ToSqlOutput, Value, ValueRef};

/// What a statement can be bound with.
pub trait Params {
    /// Calls `bind` with the parameters as one slice, in order.
    fn with_values<R>(self, bind: impl FnOnce(&[&dyn ToSql]) -> R) -> R;
}

impl Params for &[&dyn ToSql] {
    fn with_values<R>(self, bind: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
        bind(self)
    }
}

impl Params for [&(dyn ToSql + Send + Sync); 0] {
    fn with_values<R>(self, bind: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
        bind(&[])
    }
}

impl<T: ToSql, const N: usize> Params for &[&T; N] {
    fn with_values<R>(self, bind: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
        let values: [&dyn ToSql; N] = std::array::from_fn(|i| self[i] as &dyn ToSql);
        bind(&values)
    }
}

macro_rules! params_for_arrays {
    ($($n:literal)+) => {$(
        impl<T: ToSql> Params for [T; $n] {
            fn with_values<R>(self, bind: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
                let values: [&dyn ToSql; $n] = std::array::from_fn(|i| &self[i] as &dyn ToSql);
                bind(&values)
            }
        }
    )+};
}

params_for_arrays!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);

/// Parameters from an iterator (a statement built with a varying number
/// of placeholders).
pub struct ParamsFromIter<I>(I);

/// Binds the items of `iter` in order.
pub fn params_from_iter<I>(iter: I) -> ParamsFromIter<I>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    ParamsFromIter(iter)
}

impl<I> Params for ParamsFromIter<I>
where
    I: IntoIterator,
    I::Item: ToSql,
{
    fn with_values<R>(self, bind: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
        let items: Vec<I::Item> = self.0.into_iter().collect();
        let values: Vec<&dyn ToSql> = items.iter().map(|v| v as &dyn ToSql).collect();
        bind(&values)
    }
}
