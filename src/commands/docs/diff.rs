//! A unified diff of two texts, for `dwlint docs --check`.
//!
//! The gate shows what `--write` would change so a reviewer can see it in
//! the CI log without running anything. Docs are small and the changes sit
//! inside a few marked regions, so after trimming the common head and tail
//! a plain LCS over the remaining lines is cheap; a change too large for
//! that is shown as a whole replacement rather than not at all.

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// Above this many LCS cells the middle is shown as delete-then-insert.
const MAX_CELLS: usize = 4_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Equal(usize, usize),
    Delete(usize),
    Insert(usize),
}

/// The unified diff from `old` to `new`, or `""` when they are equal.
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let ops = edit_script(&a, &b);
    let changes: Vec<usize> = (0..ops.len())
        .filter(|&i| !matches!(ops[i], Op::Equal(..)))
        .collect();
    if changes.is_empty() {
        return String::new();
    }
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    let mut group_start = 0;
    for i in 1..=changes.len() {
        let split = i == changes.len() || changes[i] - changes[i - 1] > 2 * CONTEXT + 1;
        if split {
            let from = changes[group_start].saturating_sub(CONTEXT);
            let to = (changes[i - 1] + CONTEXT + 1).min(ops.len());
            // Lines of each side before the hunk: where its numbering starts.
            let old_at = ops[..from]
                .iter()
                .filter(|o| !matches!(o, Op::Insert(_)))
                .count();
            let new_at = ops[..from]
                .iter()
                .filter(|o| !matches!(o, Op::Delete(_)))
                .count();
            hunk(&ops[from..to], (old_at, new_at), &a, &b, &mut out);
            group_start = i;
        }
    }
    out
}

fn hunk(ops: &[Op], at: (usize, usize), a: &[&str], b: &[&str], out: &mut String) {
    let (mut old_at, mut new_at) = at;
    let old_count = ops.iter().filter(|o| !matches!(o, Op::Insert(_))).count();
    let new_count = ops.iter().filter(|o| !matches!(o, Op::Delete(_))).count();
    // An empty side is numbered by the line before it, as diff(1) does.
    if old_count > 0 {
        old_at += 1;
    }
    if new_count > 0 {
        new_at += 1;
    }
    out.push_str(&format!(
        "@@ -{old_at},{old_count} +{new_at},{new_count} @@\n"
    ));
    for op in ops {
        let (mark, line) = match *op {
            Op::Equal(i, _) => (' ', a[i]),
            Op::Delete(i) => ('-', a[i]),
            Op::Insert(j) => ('+', b[j]),
        };
        out.push(mark);
        match line.strip_suffix('\n') {
            Some(line) => {
                out.push_str(line);
                out.push('\n');
            }
            None => {
                out.push_str(line);
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
}

fn edit_script(a: &[&str], b: &[&str]) -> Vec<Op> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (ma, mb) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut ops: Vec<Op> = (0..head).map(|i| Op::Equal(i, i)).collect();
    if ma.len().saturating_mul(mb.len()) <= MAX_CELLS {
        lcs_ops(ma, mb, head, &mut ops);
    } else {
        ops.extend((0..ma.len()).map(|i| Op::Delete(head + i)));
        ops.extend((0..mb.len()).map(|j| Op::Insert(head + j)));
    }
    let (old_tail, new_tail) = (a.len() - tail, b.len() - tail);
    ops.extend((0..tail).map(|k| Op::Equal(old_tail + k, new_tail + k)));
    ops
}

fn lcs_ops(a: &[&str], b: &[&str], offset: usize, ops: &mut Vec<Op>) {
    let width = b.len() + 1;
    // lengths[i * width + j]: LCS length of a[i..] and b[j..].
    let mut lengths = vec![0u32; (a.len() + 1) * width];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lengths[i * width + j] = if a[i] == b[j] {
                lengths[(i + 1) * width + j + 1] + 1
            } else {
                lengths[(i + 1) * width + j].max(lengths[i * width + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            ops.push(Op::Equal(offset + i, offset + j));
            i += 1;
            j += 1;
        // On a tie the deletion goes first, so a replaced line reads old-then-new.
        } else if j < b.len()
            && (i == a.len() || lengths[i * width + j + 1] > lengths[(i + 1) * width + j])
        {
            ops.push(Op::Insert(offset + j));
            j += 1;
        } else {
            ops.push(Op::Delete(offset + i));
            i += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(unified("a\nb\n", "a\nb\n", "a", "b"), "");
    }

    #[test]
    fn a_changed_line_gets_three_lines_of_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n";
        assert_eq!(
            unified(old, new, "a/doc", "b/doc"),
            "--- a/doc\n+++ b/doc\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+five\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn distant_changes_get_separate_hunks_and_pure_insertions_number_the_line_before() {
        let old: String = (1..=20).map(|n| format!("{n}\n")).collect();
        let new = old.replacen("2\n", "2\nnew\n", 1).replacen("19\n", "", 1);
        let diff = unified(&old, &new, "a", "b");
        assert!(
            diff.contains("@@ -1,5 +1,6 @@\n 1\n 2\n+new\n 3\n"),
            "{diff}"
        );
        assert!(
            diff.contains("@@ -16,5 +17,4 @@\n 16\n 17\n 18\n-19\n 20\n"),
            "{diff}"
        );
        let inserted = unified("", "x\n", "a", "b");
        assert_eq!(inserted, "--- a\n+++ b\n@@ -0,0 +1,1 @@\n+x\n");
    }

    #[test]
    fn a_missing_final_newline_is_marked() {
        let diff = unified("a\nb", "a\nc", "a", "b");
        assert!(
            diff.ends_with("-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n"),
            "{diff}"
        );
    }
}
