# Warden code-interpreter driver for R. The agent starts it as
# `Rscript -e` (see driver_r.sh); it reads one command per
# line on fd 3 (fields "x"+hex: the code, then the run's environment as
# name/value pairs) and writes one JSON event per line on fd 4. Cells are
# evaluated in the global environment (state persists); cat/print/message
# write to fd 1 and 2, which the agent streams, closed per run by a sync
# marker. Every visible top-level value is a result, as IRkernel displays
# it (text: its printed form; a data.frame also as an HTML table); the
# cell's last expression, when visible, is the main result. Plots of the
# run come back as PNG.
Sys.unsetenv("WARDEN_R_DRIVER")
local({
  ctl <- file("/dev/fd/3", open = "rb", raw = TRUE)
  evf <- file("/dev/fd/4", open = "wb", raw = TRUE)
  mark <- c(as.raw(0), as.raw(0x1b), charToRaw("warden-sync"), as.raw(0))

  jstr <- function(s) {
    s <- enc2utf8(paste(as.character(s), collapse = "\n"))
    s <- gsub("\\", "\\\\", s, fixed = TRUE)
    s <- gsub("\"", "\\\"", s, fixed = TRUE)
    s <- gsub("\n", "\\n", s, fixed = TRUE)
    s <- gsub("\r", "\\r", s, fixed = TRUE)
    s <- gsub("\t", "\\t", s, fixed = TRUE)
    if (grepl("[\001-\037]", s, useBytes = TRUE)) {
      cs <- utf8ToInt(s)
      if (!anyNA(cs)) {
        s <- paste(vapply(cs, function(c) if (c < 32L) sprintf("\\u%04x", c) else intToUtf8(c), ""), collapse = "")
      } else {
        s <- gsub("[\001-\037]", "?", s, useBytes = TRUE)
      }
    }
    paste0("\"", s, "\"")
  }
  send <- function(...) {
    f <- list(...)
    body <- paste0(vapply(names(f), jstr, ""), ":", vapply(f, function(v) if (is.logical(v)) tolower(as.character(v)) else jstr(v), ""), collapse = ",")
    writeBin(charToRaw(enc2utf8(paste0("{", body, "}\n"))), evf)
    flush(evf)
  }
  unhex <- function(h) {
    h <- substring(h, 2L)
    n <- nchar(h)
    if (n == 0L) return("")
    s <- rawToChar(as.raw(strtoi(substring(h, seq(1L, n, 2L), seq(2L, n, 2L)), 16L)))
    Encoding(s) <- "UTF-8"
    s
  }
  html_escape <- function(s) {
    s <- gsub("&", "&amp;", s, fixed = TRUE)
    s <- gsub("<", "&lt;", s, fixed = TRUE)
    gsub(">", "&gt;", s, fixed = TRUE)
  }
  # A data.frame as an HTML table, in the shape of IRkernel's (repr's).
  df_html <- function(d) {
    d <- as.data.frame(d)
    n <- nrow(d)
    shown <- if (n > 60L) d[seq_len(60L), , drop = FALSE] else d
    types <- vapply(d, function(col) {
      t <- class(col)[1L]
      switch(t, numeric = "dbl", integer = "int", character = "chr", logical = "lgl", factor = "fct", t)
    }, "")
    cells <- vapply(shown, function(col) html_escape(format(col)), character(nrow(shown)))
    if (!is.matrix(cells)) cells <- matrix(cells, nrow = nrow(shown))
    rn <- rownames(shown)
    auto <- identical(rn, as.character(seq_len(nrow(shown))))
    head <- paste0(if (!auto) "<th></th>" else "", paste0("<th scope=col>", html_escape(names(d)), "</th>", collapse = ""))
    typ <- paste0(if (!auto) "<th></th>" else "", paste0("<th scope=col>&lt;", html_escape(types), "&gt;</th>", collapse = ""))
    rows <- vapply(seq_len(nrow(shown)), function(i) {
      paste0("\t<tr>", if (!auto) paste0("<th scope=row>", html_escape(rn[i]), "</th>") else "",
             paste0("<td>", cells[i, ], "</td>", collapse = ""), "</tr>")
    }, "")
    paste0("<table class=\"dataframe\">\n<caption>A data.frame: ", n, " &times; ", ncol(d), "</caption>\n",
           "<thead>\n\t<tr>", head, "</tr>\n\t<tr>", typ, "</tr>\n</thead>\n<tbody>\n",
           paste0(rows, collapse = "\n"), "\n</tbody>\n</table>\n")
  }
  printed <- function(v) {
    out <- utils::capture.output(if (isS4(v)) methods::show(v) else print(v))
    paste(out, collapse = "\n")
  }
  result <- function(v, main) {
    text <- printed(v)
    if (is.data.frame(v)) {
      h <- tryCatch(df_html(v), error = function(e) NULL)
      if (!is.null(h)) return(send(type = "result", is_main_result = main, text = text, html = h))
    }
    send(type = "result", is_main_result = main, text = text)
  }

  # Plots go to PNG files, sent at the end of the run (or when the device
  # is closed by the cell: dev.off() leaves the file for the end).
  plotdir <- file.path(tempdir(), "warden-plots")
  dir.create(plotdir, showWarnings = FALSE, mode = "0700")
  plotn <- 0L
  options(device = function(...) {
    plotn <<- plotn + 1L
    grDevices::png(filename = file.path(plotdir, sprintf("plot-%06d-%%03d.png", plotn)),
                   width = 7, height = 7, units = "in", res = 120)
  })
  send_plots <- function() {
    while (!is.null(grDevices::dev.list())) grDevices::dev.off()
    for (f in sort(list.files(plotdir, full.names = TRUE))) {
      sz <- file.info(f)$size
      if (!is.na(sz) && sz > 0) {
        b <- readBin(f, "raw", sz)
        send(type = "result", is_main_result = FALSE, text = "plot without title", png = base64(b))
      }
      unlink(f)
    }
  }
  b64chars <- strsplit("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", "")[[1]]
  base64 <- function(b) {
    n <- length(b)
    pad <- (3L - n %% 3L) %% 3L
    v <- as.integer(c(b, as.raw(rep(0L, pad))))
    m <- matrix(v, nrow = 3L)
    i <- m[1L, ] * 65536L + m[2L, ] * 256L + m[3L, ]
    q <- rbind(i %/% 262144L, (i %/% 4096L) %% 64L, (i %/% 64L) %% 64L, i %% 64L)
    out <- b64chars[as.vector(q) + 1L]
    if (pad > 0L) out[(length(out) - pad + 1L):length(out)] <- "="
    paste(out, collapse = "")
  }

  run <- function(code) {
    state <- new.env()
    state$err <- NULL
    onerror <- function(e) {
      # The cell's frames: those below the eval of a top-level expression,
      # without the condition handlers' own.
      calls <- sys.calls()
      top <- which(vapply(calls, function(cl) identical(cl, quote(eval(exprs[[i]], envir = .GlobalEnv))), TRUE))
      calls <- if (length(top) > 0L) calls[seq_along(calls) > max(top)] else list()
      keep <- !vapply(calls, function(cl) is.call(cl) && (identical(cl[[1L]], quote(h)) || identical(cl[[1L]], quote(.handleSimpleError))), TRUE)
      state$calls <- vapply(calls[keep], function(cl) paste(deparse(cl, nlines = 1L), collapse = ""), "")
    }
    tryCatch(
      withCallingHandlers({
        exprs <- parse(text = code, keep.source = FALSE, srcfile = NULL)
        n <- length(exprs)
        for (i in seq_len(n)) {
          r <- withVisible(eval(exprs[[i]], envir = .GlobalEnv))
          if (r$visible) result(r$value, i == n)
        }
      },
      warning = function(w) {
        call <- conditionCall(w)
        msg <- if (is.null(call)) conditionMessage(w) else paste0("In ", paste(deparse(call, nlines = 1L), collapse = ""), " : ", conditionMessage(w))
        cat("Warning message:\n", msg, "\n", sep = "", file = stderr())
        invokeRestart("muffleWarning")
      },
      error = onerror),
      interrupt = function(e) {
        state$err <- list(name = "KeyboardInterrupt", value = "interrupted", traceback = "KeyboardInterrupt: the run was interrupted")
      },
      error = function(e) {
        call <- conditionCall(e)
        if (identical(call, quote(eval(exprs[[i]], envir = .GlobalEnv))) ||
            identical(call, quote(parse(text = code, keep.source = FALSE, srcfile = NULL)))) call <- NULL
        head <- if (is.null(call)) paste0("Error: ", conditionMessage(e)) else
          paste0("Error in ", paste(deparse(call, nlines = 1L), collapse = ""), ": ", conditionMessage(e))
        tb <- head
        if (length(state$calls) > 0L) tb <- paste0(head, "\nTraceback:\n", paste0(seq_along(state$calls), ". ", state$calls, collapse = "\n"))
        state$err <- list(name = "ERROR", value = conditionMessage(e), traceback = tb)
      })
    tryCatch(send_plots(), error = function(e) NULL)
    if (!is.null(state$err)) send(type = "error", name = state$err$name, value = state$err$value, traceback = state$err$traceback)
  }

  send(type = "ready", pid = as.character(Sys.getpid()))
  repeat {
    line <- tryCatch(readLines(ctl, n = 1L, warn = FALSE), interrupt = function(e) NA_character_)
    if (length(line) == 0L) break
    if (is.na(line)) next
    tryCatch({
      f <- strsplit(line, " ", fixed = TRUE)[[1L]]
      code <- unhex(f[1L])
      envs <- f[-1L]
      names <- character(0)
      old <- character(0)
      if (length(envs) >= 2L) {
        idx <- seq(1L, length(envs) - 1L, 2L)
        names <- vapply(envs[idx], unhex, "", USE.NAMES = FALSE)
        vals <- vapply(envs[idx + 1L], unhex, "", USE.NAMES = FALSE)
        old <- Sys.getenv(names, unset = NA, names = FALSE)
        do.call(Sys.setenv, stats::setNames(as.list(vals), names))
      }
      run(code)
      for (i in seq_along(names)) {
        if (is.na(old[i])) Sys.unsetenv(names[i]) else do.call(Sys.setenv, stats::setNames(list(old[i]), names[i]))
      }
    }, interrupt = function(e) NULL, error = function(e) {
      try(send(type = "error", name = "ERROR", value = conditionMessage(e), traceback = conditionMessage(e)), silent = TRUE)
    })
    tryCatch({
      flush(stdout())
      flush(stderr())
      out <- file("/dev/fd/1", open = "wb", raw = TRUE)
      writeBin(mark, out)
      close(out)
      err <- file("/dev/fd/2", open = "wb", raw = TRUE)
      writeBin(mark, err)
      close(err)
      send(type = "done")
    }, interrupt = function(e) send(type = "done"))
  }
})
