"""BM25 ranking of offered tools against the conversation: the score itself against a hand count,
a ranking table over a 20-tool catalogue, and the rules around it (under the cap nothing changes,
called and named tools are kept, offered order is preserved)."""

from __future__ import annotations

import math

import pytest

from hearth.tool_guard.tool_rank import bm25, rank_tools, tool_text, words


def tool(name: str, description: str, **params: str) -> dict:
    props = {p: {"type": "string", "description": d} for p, d in params.items()}
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": {"type": "object", "properties": props}}}


CATALOGUE = [
    tool("get_weather", "Current weather for a city", city="city name", unit="celsius or fahrenheit"),
    tool("get_forecast", "Weather forecast for the next days", city="city name", days="number of days"),
    tool("send_email", "Send an email message", to="recipient address", subject="subject line", body="text"),
    tool("read_email", "Read emails in the inbox", folder="mailbox folder"),
    tool("create_event", "Create a calendar event", title="event title", start="start time"),
    tool("list_events", "List calendar events for a day", date="the day"),
    tool("convert_currency", "Convert an amount between currencies", amount="amount", to="target currency code"),
    tool("stock_price", "Latest stock price of a ticker symbol", ticker="ticker symbol"),
    tool("translate", "Translate text into another language", text="text", language="target language"),
    tool("search_web", "Search the web for pages", query="search query"),
    tool("get_directions", "Driving or walking directions between places", origin="start", destination="end"),
    tool("book_flight", "Book a flight ticket", origin="departure airport", destination="arrival airport"),
    tool("book_hotel", "Reserve a hotel room", city="city", nights="number of nights"),
    tool("set_timer", "Start a countdown timer", minutes="duration in minutes"),
    tool("play_music", "Play a song or playlist", song="song title"),
    tool("calculate", "Evaluate a math expression", expression="arithmetic expression"),
    tool("get_news", "Latest news headlines on a topic", topic="news topic"),
    tool("order_food", "Order food delivery from a restaurant", restaurant="restaurant", dish="dish"),
    tool("check_balance", "Bank account balance", account="account number"),
    tool("find_recipe", "Find a cooking recipe", ingredients="ingredients"),
]


def names(tools: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def user(text: str) -> list[dict]:
    return [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": text}]


def test_bm25_against_a_hand_count():
    docs = [["weather", "city"], ["email", "send", "email"], ["city", "hotel", "room", "book"]]
    n, avg = 3, 3.0
    idf_city = math.log(1 + (n - 2 + 0.5) / (2 + 0.5))
    idf_hotel = math.log(1 + (n - 1 + 0.5) / (1 + 0.5))
    want0 = idf_city * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 2 / avg))
    want2 = idf_city * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 4 / avg)) + idf_hotel * 2.2 / (1 + 1.2 * (0.25 + 0.75 * 4 / avg))
    got = bm25(["city", "hotel"], docs)
    assert got[0] == pytest.approx(want0) and got[1] == 0.0 and got[2] == pytest.approx(want2)


def test_words_split_identifiers():
    assert words("getWeather send_email HTTPServer v2") == ["weather", "send", "email", "http", "server", "v", "2"]
    assert "unit" in words(tool_text(CATALOGUE[0])) and "fahrenheit" in words(tool_text(CATALOGUE[0]))


# question -> the tools that must be in the top 3
RANKING = [
    ("What's the weather like in Oslo right now?", {"get_weather"}),
    ("Will it rain in Paris over the next 3 days? Forecast please", {"get_forecast"}),
    ("Email my boss that I'll be late, subject: delay", {"send_email"}),
    ("How much is 100 USD in euros? convert the currency", {"convert_currency"}),
    ("What is AAPL's stock price?", {"stock_price"}),
    ("Put a meeting in my calendar tomorrow at 10", {"create_event"}),
    ("Reserve a hotel room in Rome for 2 nights", {"book_hotel"}),
    ("I need a flight ticket from JFK to LAX", {"book_flight"}),
    ("Start a 5 minute timer", {"set_timer"}),
    ("Translate 'good morning' into Japanese", {"translate"}),
]


@pytest.mark.parametrize("question,wanted", RANKING)
def test_ranking_table(question, wanted):
    top = names(rank_tools(CATALOGUE, user(question), 3))
    assert len(top) == 3 and wanted <= set(top)


def test_under_the_cap_nothing_changes():
    assert rank_tools(CATALOGUE, user("anything"), 20) is CATALOGUE


def test_kept_tools_stay_and_offered_order_is_kept():
    top = names(rank_tools(CATALOGUE, user("weather in Oslo"), 3, keep=frozenset({"play_music"})))
    assert "play_music" in top and "get_weather" in top and len(top) == 3
    assert top == [n for n in names(CATALOGUE) if n in top]


def test_the_last_tool_result_counts():
    convo = user("Plan my trip") + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "type": "function",
                                                             "function": {"name": "search_web", "arguments": {}}}]},
        {"role": "tool", "tool_call_id": "c", "content": "Best option: fly to Lisbon, then book a hotel room"}]
    top = names(rank_tools(CATALOGUE, convo, 3))
    assert {"book_hotel", "book_flight"} <= set(top)
