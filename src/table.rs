//! Aligned text tables for results a person compares (summaries, pass tables, benchmarks).

/// A table: a header row and data rows; columns listed in `right` align right (numbers).
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    right: Vec<usize>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table { header: header.iter().map(|s| s.to_string()).collect(), rows: Vec::new(), right: Vec::new() }
    }

    pub fn align_right(mut self, columns: &[usize]) -> Table {
        self.right = columns.to_vec();
        self
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let columns = self.header.len().max(self.rows.iter().map(Vec::len).max().unwrap_or(0));
        let mut widths = vec![0; columns];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |row: &[String], out: &mut String| {
            let cells: Vec<String> = (0..columns)
                .map(|i| {
                    let cell = row.get(i).map_or("", String::as_str);
                    if self.right.contains(&i) {
                        format!("{cell:>width$}", width = widths[i])
                    } else {
                        format!("{cell:<width$}", width = widths[i])
                    }
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        };
        line(&self.header, &mut out);
        let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
        out.push_str(&rule.join("  "));
        out.push('\n');
        for row in &self.rows {
            line(row, &mut out);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align() {
        let mut t = Table::new(&["op", "count"]).align_right(&[1]);
        t.row(vec!["add".into(), "3".into()]);
        t.row(vec!["get-tuple-element".into(), "12".into()]);
        assert_eq!(
            t.render(),
            "op                 count\n-----------------  -----\nadd                    3\nget-tuple-element     12\n"
        );
    }
}
