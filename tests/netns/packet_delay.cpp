// packet_delay: netem's delay and loss for a kernel without sch_netem, in user space. It binds
// an NFQUEUE (nfnetlink_queue) queue, to which an iptables rule of the test bed sends a host's
// outgoing packets (scripts/netns_cluster.sh `delay`), and accepts each packet `delay` after it
// arrived; with --loss it drops that share of them at random. Only verdicts cross into user
// space: the queue is bound in "meta" copy mode (no payload is copied) and with the GSO flag
// (a 64 KiB TCP segment is one packet, not 45), so 10 Gbit/s is about 20,000 packets a second.
// Packets leave in arrival order, as netem's do with a fixed delay: one batch verdict accepts
// every packet whose time has come (NFQNL_MSG_VERDICT_BATCH accepts all ids up to the one given).
//
// Usage: packet_delay --queue N --delay-ms D [--loss-percent P] [--seed S] [--max-queued Q]
// Runs until SIGTERM/SIGINT; prints "ready" on stdout once the queue is bound. Needs
// CAP_NET_ADMIN in the namespace it runs in. Raw netlink (linux/netfilter headers), no library.
// glibc's network headers first: linux/netfilter.h's linux/in.h then yields to them.
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <time.h>
#include <vector>

namespace {

volatile std::sig_atomic_t stop_requested = 0;
void request_stop(int) { stop_requested = 1; }

std::int64_t now_nanoseconds() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "packet_delay: %s: %s\n", what.c_str(), errno ? std::strerror(errno) : "");
  std::exit(1);
}

// One nfnetlink message under construction: header, nfgenmsg, attributes.
class Message {
 public:
  Message(std::uint16_t type, std::uint16_t queue, std::uint16_t flags) {
    buffer_.resize(NLMSG_HDRLEN + NLMSG_ALIGN(sizeof(nfgenmsg)));
    auto* header = reinterpret_cast<nlmsghdr*>(buffer_.data());
    header->nlmsg_type = static_cast<std::uint16_t>((NFNL_SUBSYS_QUEUE << 8) | type);
    header->nlmsg_flags = static_cast<std::uint16_t>(NLM_F_REQUEST | flags);
    auto* generic = reinterpret_cast<nfgenmsg*>(buffer_.data() + NLMSG_HDRLEN);
    generic->nfgen_family = AF_UNSPEC;
    generic->version = NFNETLINK_V0;
    generic->res_id = htons(queue);
  }
  void attribute(std::uint16_t type, const void* data, std::size_t size) {
    std::size_t at = buffer_.size();
    buffer_.resize(at + NLA_ALIGN(NLA_HDRLEN + size), 0);
    auto* attribute = reinterpret_cast<nlattr*>(buffer_.data() + at);
    attribute->nla_type = type;
    attribute->nla_len = static_cast<std::uint16_t>(NLA_HDRLEN + size);
    std::memcpy(buffer_.data() + at + NLA_HDRLEN, data, size);
  }
  void send(int socket_fd) {
    reinterpret_cast<nlmsghdr*>(buffer_.data())->nlmsg_len = static_cast<std::uint32_t>(buffer_.size());
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(socket_fd, buffer_.data(), buffer_.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0) {
      fail("sending to nfnetlink_queue");
    }
  }

 private:
  std::vector<char> buffer_;
};

// Sends a configuration message and waits for its acknowledgement (an error is fatal).
void configure(int socket_fd, Message message, const char* what) {
  message.send(socket_fd);
  char reply[4096];
  ssize_t got = recv(socket_fd, reply, sizeof reply, 0);
  if (got < 0) fail(std::string("waiting for the kernel's answer to ") + what);
  auto* header = reinterpret_cast<nlmsghdr*>(reply);
  if (header->nlmsg_type == NLMSG_ERROR) {
    auto* error = static_cast<nlmsgerr*>(NLMSG_DATA(header));
    if (error->error != 0) {
      errno = -error->error;
      fail(std::string("the kernel refused ") + what +
           " (is nfnetlink_queue there, and are we root in this namespace?)");
    }
  }
}

void verdict(int socket_fd, std::uint16_t queue, std::uint16_t type, std::uint32_t id,
             std::uint32_t decision) {
  Message message(type, queue, 0);
  nfqnl_msg_verdict_hdr header{htonl(decision), htonl(id)};
  message.attribute(NFQA_VERDICT_HDR, &header, sizeof header);
  message.send(socket_fd);
}

double parse_number(const char* text, const char* flag, double low, double high) {
  char* end = nullptr;
  double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || value < low || value > high) {
    std::fprintf(stderr, "packet_delay: %s expects a number in [%g, %g], got '%s'\n", flag, low, high, text);
    std::exit(2);
  }
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint16_t queue = 0;
  double delay_ms = -1, loss_percent = 0;
  std::uint32_t seed = 1, max_queued = 20000;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "packet_delay: %s needs a value\n", flag.c_str());
      return 2;
    }
    const char* value = argv[++i];
    if (flag == "--queue") queue = static_cast<std::uint16_t>(parse_number(value, "--queue", 0, 65535));
    else if (flag == "--delay-ms") delay_ms = parse_number(value, "--delay-ms", 0, 10000);
    else if (flag == "--loss-percent") loss_percent = parse_number(value, "--loss-percent", 0, 100);
    else if (flag == "--seed") seed = static_cast<std::uint32_t>(parse_number(value, "--seed", 0, 4294967295.0));
    else if (flag == "--max-queued") max_queued = static_cast<std::uint32_t>(parse_number(value, "--max-queued", 1, 1e6));
    else {
      std::fprintf(stderr, "packet_delay: unknown flag %s (known: --queue, --delay-ms, --loss-percent, "
                   "--seed, --max-queued)\n", flag.c_str());
      return 2;
    }
  }
  if (delay_ms < 0) {
    std::fprintf(stderr, "usage: packet_delay --queue N --delay-ms D [--loss-percent P] [--seed S] [--max-queued Q]\n");
    return 2;
  }
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);
  // The default 50 us timer slack would add up to 50 us to every wake-up.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

  int socket_fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (socket_fd < 0) fail("opening a netfilter netlink socket");
  int buffer_bytes = 16 << 20;  // a burst of packet messages must not overflow it
  if (setsockopt(socket_fd, SOL_SOCKET, SO_RCVBUFFORCE, &buffer_bytes, sizeof buffer_bytes) < 0) {
    setsockopt(socket_fd, SOL_SOCKET, SO_RCVBUF, &buffer_bytes, sizeof buffer_bytes);
  }
  // A message lost to a full buffer leaves its packet queued; the next batch verdict, which
  // covers every smaller id, still releases it, so ENOBUFS need not be reported.
  int on = 1;
  setsockopt(socket_fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &on, sizeof on);
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (bind(socket_fd, reinterpret_cast<sockaddr*>(&local), sizeof local) < 0) fail("binding the netlink socket");

  {
    Message bind_queue(NFQNL_MSG_CONFIG, queue, NLM_F_ACK);
    nfqnl_msg_config_cmd command{NFQNL_CFG_CMD_BIND, 0, htons(AF_INET)};
    bind_queue.attribute(NFQA_CFG_CMD, &command, sizeof command);
    configure(socket_fd, std::move(bind_queue), "binding the queue");
  }
  {
    Message parameters(NFQNL_MSG_CONFIG, queue, NLM_F_ACK);
    nfqnl_msg_config_params copy{htonl(0), NFQNL_COPY_META};
    parameters.attribute(NFQA_CFG_PARAMS, &copy, sizeof copy);
    std::uint32_t maximum = htonl(max_queued);
    parameters.attribute(NFQA_CFG_QUEUE_MAXLEN, &maximum, sizeof maximum);
    std::uint32_t flags = htonl(NFQA_CFG_F_GSO);
    parameters.attribute(NFQA_CFG_MASK, &flags, sizeof flags);
    parameters.attribute(NFQA_CFG_FLAGS, &flags, sizeof flags);
    configure(socket_fd, std::move(parameters), "setting the queue's copy mode, length and GSO flag");
  }
  std::printf("ready\n");
  std::fflush(stdout);

  struct Held {
    std::uint32_t id;
    std::int64_t due;
  };
  std::deque<Held> held;
  const std::int64_t delay_ns = static_cast<std::int64_t>(delay_ms * 1e6);
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> uniform(0.0, 100.0);
  std::vector<char> buffer(1 << 16);
  while (!stop_requested) {
    // Release what is due: one batch verdict for the newest due packet accepts all before it.
    std::int64_t now = now_nanoseconds();
    if (!held.empty() && held.front().due <= now) {
      std::uint32_t last = held.front().id;
      while (!held.empty() && held.front().due <= now) {
        last = held.front().id;
        held.pop_front();
      }
      verdict(socket_fd, queue, NFQNL_MSG_VERDICT_BATCH, last, NF_ACCEPT);
      continue;
    }
    timespec wait{0, 200'000'000};  // wake at least every 0.2 s to notice a stop
    if (!held.empty()) {
      std::int64_t left = held.front().due - now;
      wait = {static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
    }
    pollfd readable{socket_fd, POLLIN, 0};
    int ready = ppoll(&readable, 1, &wait, nullptr);
    if (ready < 0) {
      if (errno == EINTR) continue;
      fail("waiting for packets");
    }
    if (ready == 0) continue;
    for (;;) {
      ssize_t got = recv(socket_fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
      if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) break;
        if (errno == EINTR) continue;
        fail("receiving packets");
      }
      std::int64_t arrived = now_nanoseconds();
      int left = static_cast<int>(got);
      for (auto* header = reinterpret_cast<nlmsghdr*>(buffer.data()); NLMSG_OK(header, left);
           header = NLMSG_NEXT(header, left)) {
        if ((header->nlmsg_type & 0xff) != NFQNL_MSG_PACKET) continue;
        char* at = static_cast<char*>(NLMSG_DATA(header)) + NLMSG_ALIGN(sizeof(nfgenmsg));
        char* end = reinterpret_cast<char*>(header) + header->nlmsg_len;
        while (at + NLA_HDRLEN <= end) {
          auto* attribute = reinterpret_cast<nlattr*>(at);
          if (attribute->nla_len < NLA_HDRLEN) break;
          if ((attribute->nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR) {
            nfqnl_msg_packet_hdr packet{};
            std::memcpy(&packet, at + NLA_HDRLEN, sizeof packet);
            std::uint32_t id = ntohl(packet.packet_id);
            if (loss_percent > 0 && uniform(random) < loss_percent) {
              verdict(socket_fd, queue, NFQNL_MSG_VERDICT, id, NF_DROP);
            } else {
              held.push_back({id, arrived + delay_ns});
            }
            break;
          }
          at += NLA_ALIGN(attribute->nla_len);
        }
      }
    }
  }
  // Whatever is still held leaves now (the queue's iptables rule bypasses once we are gone).
  if (!held.empty()) verdict(socket_fd, queue, NFQNL_MSG_VERDICT_BATCH, held.back().id, NF_ACCEPT);
  close(socket_fd);
  return 0;
}
