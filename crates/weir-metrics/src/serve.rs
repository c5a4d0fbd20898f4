//! The HTTP side: `GET /metrics` answered on a thread of its own, for as
//! long as the process lives.

use crate::catalogue as c;
use crate::{process, Families, Listener, Scrape};
use std::io;
use std::sync::Arc;
use tiny_http::{Header, Method, Response, Server};

/// The content type of the text exposition format, version 0.0.4.
const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The whole body of one scrape: `what`'s metrics, then the process's.
pub fn render(what: &dyn Scrape) -> String {
    let mut out = Families::default();
    out.gauge(&c::BUILD_INFO, &[("version", env!("CARGO_PKG_VERSION"))], 1.0);
    what.collect(&mut out);
    process::collect(&mut out);
    out.encode()
}

impl Listener {
    /// Answer `GET /metrics` with `what`'s metrics, on a thread of its own that
    /// runs until the process exits. Requests are answered one at a time: a
    /// scrape costs the reads of [`render`] and nothing else.
    pub fn serve(self, what: Arc<dyn Scrape>) -> io::Result<()> {
        let server = Server::from_listener(self.socket, None).map_err(io::Error::other)?;
        std::thread::Builder::new().name("weir-metrics".into()).spawn(move || answer(&server, &*what))?;
        Ok(())
    }
}

fn answer(server: &Server, what: &dyn Scrape) {
    for request in server.incoming_requests() {
        let path = request.url().split('?').next().unwrap_or("").to_string();
        let get = matches!(request.method(), Method::Get | Method::Head);
        let response = match (get, path.as_str()) {
            (true, "/metrics") => text(render(what), 200, CONTENT_TYPE),
            (true, "/") => text("weir: metrics at /metrics\n".into(), 200, "text/plain; charset=utf-8"),
            (false, "/" | "/metrics") => text("only GET and HEAD\n".into(), 405, "text/plain; charset=utf-8"),
            _ => text("not found: weir serves /metrics\n".into(), 404, "text/plain; charset=utf-8"),
        };
        // A scraper that went away gets nothing more; the next one is answered.
        let _ = request.respond(response);
    }
}

fn text(body: String, status: u16, content_type: &str) -> Response<io::Cursor<Vec<u8>>> {
    let mut r = Response::from_string(body).with_status_code(status);
    if let Ok(h) = Header::from_bytes("Content-Type", content_type) {
        r.add_header(h);
    }
    r
}
