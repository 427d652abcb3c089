# Writes Jane Austen's six novels (from the janeaustenr package) as one text
# file per chapter: <dir>/<book>-<NNN>.txt. Text before the first chapter
# heading (title page, volume headings) goes into chapter 000.
args <- commandArgs(trailingOnly = TRUE)
out <- args[1]
suppressMessages(library(janeaustenr))
books <- c("sensesensibility", "prideprejudice", "mansfieldpark", "emma",
           "northangerabbey", "persuasion")
for (b in books) {
  lines <- get(b)
  chapter <- cumsum(grepl("^(CHAPTER|Chapter) [0-9IVXLC]+", lines))
  for (ch in unique(chapter)) {
    body <- lines[chapter == ch]
    if (sum(nchar(body)) == 0) next
    writeLines(body, file.path(out, sprintf("%s-%03d.txt", b, ch)), useBytes = TRUE)
  }
}
